"""The notification log's rules, folded without a broker: the first claim wins, a silent owner is
taken over after its lease, delivered and gave_up end it; and the retry schedule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobs.notifications.claims import (
    ATTEMPT,
    CLAIM,
    DELIVERED,
    GAVE_UP,
    RENEW,
    NotificationLog,
    kafka_key,
    key_of,
    pending,
)
from jobs.notifications.delivery import RetrySettings
from schemas import Job, JobTerms, Notification, decode, encode

S = 1_000_000  # a second, in the records' microseconds
T = 1_800_000_000 * S
URL = "http://hooks.example/done"


def record(kind: str, worker: str, claim_id: str, at_s: float, **fields: object) -> Notification:
    base = Notification("job", 7, kind, worker, claim_id, T + round(at_s * S), URL)
    return replace(base, **fields)  # type: ignore[arg-type]


def claim(worker: str, claim_id: str, at_s: float, lease_s: int = 60) -> Notification:
    return record(CLAIM, worker, claim_id, at_s, lease_ms=lease_s * 1000)


def test_a_notification_record_round_trips_through_avro() -> None:
    sent = record(ATTEMPT, "a", "c1", 1, attempts=2, http_status=503, error="HTTP 503", job_state="failed")
    assert decode(encode(sent), Notification) == sent


def test_the_first_claim_in_the_log_wins_and_a_later_one_within_the_lease_loses() -> None:
    log = NotificationLog.of([claim("a", "c1", 0), claim("b", "c2", 0.001), claim("b", "c3", 59)])
    state = log.get("job/7")
    assert state is not None
    assert (state.owner, state.claim_id, state.takeovers) == ("a", "c1", 0)
    assert not state.claimable(T + 60 * S)  # exactly the lease: not yet silent for longer


def test_an_owner_that_went_silent_past_its_lease_is_taken_over_and_its_renewals_keep_it() -> None:
    renewed = NotificationLog.of([claim("a", "c1", 0), record(RENEW, "a", "c1", 50), claim("b", "c2", 100)])
    state = renewed.get("job/7")
    assert state is not None and (state.owner, state.takeovers) == ("a", 0)  # 100 - 50 <= 60

    silent = NotificationLog.of([claim("a", "c1", 0), record(RENEW, "a", "c1", 30), claim("b", "c2", 90.5)])
    state = silent.get("job/7")
    assert state is not None and (state.owner, state.claim_id, state.takeovers) == ("b", "c2", 1)
    # the old owner's records no longer hold the claim: only the new owner's count as its activity
    silent.add(record(RENEW, "a", "c1", 200))
    assert state.claimable(T + 151 * S) and state.last_activity_at == T + round(90.5 * S)


def test_the_lease_is_the_one_the_owners_claim_announced_not_the_claimants() -> None:
    log = NotificationLog.of([claim("a", "c1", 0, lease_s=300), claim("b", "c2", 200, lease_s=10)])
    state = log.get("job/7")
    assert state is not None and state.owner == "a"


def test_a_restarted_owner_claims_again_at_once_under_a_new_claim() -> None:
    log = NotificationLog.of([claim("a", "c1", 0), claim("b", "c2", 1), claim("a", "c9", 2)])
    state = log.get("job/7")
    assert state is not None and (state.owner, state.claim_id) == ("a", "c9")


def test_delivered_ends_it_whatever_comes_after() -> None:
    log = NotificationLog.of(
        [
            claim("a", "c1", 0),
            record(ATTEMPT, "a", "c1", 1, attempts=1, http_status=503, error="HTTP 503 Service Unavailable"),
            record(DELIVERED, "a", "c1", 2, attempts=2, http_status=200, job_state="failed"),
            claim("b", "c2", 500),
            record(ATTEMPT, "b", "c2", 501, attempts=3, error="late"),
        ]
    )
    state = log.get("job/7")
    assert state is not None and state.final and not state.claimable(T + 10_000 * S)
    assert state.to_dict() == {
        "state": "delivered",
        "url": URL,
        "idempotency_key": "job/7",
        "attempts": 2,
        "last_error": "HTTP 503 Service Unavailable",
        "http_status": 200,
        "last_attempt_at": "2027-01-15T08:00:02+00:00",
        "delivered_at": "2027-01-15T08:00:02+00:00",
        "gave_up_at": None,
        "worker": "a",
    }


def test_states_pending_failing_and_gave_up() -> None:
    job = Job("job", "tiny", "in.jsonl", "text", 3, T, submission=7, terms=JobTerms(notify=URL))
    assert pending(job).to_dict()["state"] == "pending" and key_of(job) == "job/7"
    log = NotificationLog.of([claim("a", "c1", 0)])
    assert log.states["job/7"].phase == "pending"
    log.add(record(ATTEMPT, "a", "c1", 1, attempts=1, error="connection refused by 127.0.0.1:9"))
    assert (log.states["job/7"].phase, log.states["job/7"].last_error) == (
        "failing",
        "connection refused by 127.0.0.1:9",
    )
    log.add(record(GAVE_UP, "a", "c1", 2, attempts=1, error="gave up after 1 attempt(s)"))
    assert log.states["job/7"].to_dict()["state"] == "gave_up"


def test_folding_an_attempt_twice_or_out_of_order_keeps_the_newest_outcome() -> None:
    first = record(ATTEMPT, "a", "c1", 1, attempts=1, http_status=500, error="HTTP 500")
    second = record(ATTEMPT, "a", "c1", 3, attempts=2, http_status=502, error="HTTP 502")
    log = NotificationLog.of([claim("a", "c1", 0), first, second, first, second])  # written, then read back
    state = log.states["job/7"]
    assert (state.attempts, state.last_error, state.first_attempt_at, state.last_attempt_at) == (
        2,
        "HTTP 502",
        T + S,
        T + 3 * S,
    )


def test_a_job_without_a_submission_is_notified_once_per_registration() -> None:
    old = Job("job", "tiny", "in.jsonl", "text", 3, 1234)
    assert key_of(old) == "job/1234"
    done = record(DELIVERED, "a", "c1", 1)
    assert (kafka_key(done), kafka_key(record(ATTEMPT, "a", "c1", 1))) == ("job/7/done", "job/7")


def test_the_retry_delays_double_from_the_first_up_to_the_longest() -> None:
    policy = RetrySettings()
    assert [policy.delay_after(n) for n in range(9)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]
    assert RetrySettings(first_retry_s=0.2, max_retry_s=0.5).delay_after(10_000) == 0.5


def test_the_next_attempt_is_due_after_the_delay_from_the_last_one_in_the_log() -> None:
    policy = RetrySettings(first_retry_s=2)
    log = NotificationLog.of([claim("a", "c1", 0)])
    state = log.states["job/7"]
    assert policy.next_attempt_at(state) == 0  # the first: at once
    log.add(record(ATTEMPT, "a", "c1", 10, attempts=1))
    log.add(record(ATTEMPT, "a", "c1", 12, attempts=2))
    assert policy.next_attempt_at(state) == T + 16 * S  # 12 s + 2 x 2 s


def test_retries_stop_after_the_attempts_or_the_time_allowed() -> None:
    log = NotificationLog.of([claim("a", "c1", 0), record(ATTEMPT, "a", "c1", 1, attempts=3)])
    state = log.states["job/7"]
    assert RetrySettings(max_attempts=3).gives_up(state, T + 2 * S)
    assert not RetrySettings(max_attempts=4).gives_up(state, T + 2 * S)
    assert not RetrySettings(give_up_after_s=100).gives_up(state, T + 100 * S)
    assert RetrySettings(give_up_after_s=100).gives_up(state, T + 101 * S)


@pytest.mark.parametrize("policy", [{"first_retry_s": 0}, {"first_retry_s": 5, "max_retry_s": 1}, {"max_attempts": 0}])
def test_a_retry_policy_that_cannot_work_is_refused(policy: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetrySettings(**policy)  # type: ignore[arg-type]
