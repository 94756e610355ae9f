"""The notification log folded in log order: who owns each job's notification, and how it went.

Every notifier reads the same one-partition log (topic `notifications`) in the same order and
applies the same rules to it, so they agree on an owner without talking to each other:
- the first claim of a notification wins;
- a later claim by another worker takes it over only if it was made more than the owner's lease
  (announced in the owner's claim) after the owner's newest record (claim, renew, attempt):
  judged from the times the records carry, so every reader judges alike;
- a claim by the owner's own worker (restarted with the same --instance-id) replaces its claim;
- delivered or gave_up ends it: no record after that one changes it.
Pure: folded and tested without a broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from schemas import Job, Notification

CLAIM = "claim"
RENEW = "renew"  # the owner is alive (written while it waits between attempts)
ATTEMPT = "attempt"  # a POST that failed
DELIVERED = "delivered"  # a POST answered 2xx
GAVE_UP = "gave_up"
FINAL = frozenset({DELIVERED, GAVE_UP})


def submission_of(job: Job) -> int:
    """The submission a notification is for: the job's, or its submitted_at for a job registered
    before submissions were told apart (one per registration either way)."""
    return job.submission if job.submission is not None else job.submitted_at


def notification_key(job_id: str, submission: int) -> str:
    """One key per job submission: the log's key, and the webhook's Idempotency-Key."""
    return f"{job_id}/{submission}"


def key_of(job: Job) -> str:
    return notification_key(job.job_id, submission_of(job))


def kafka_key(record: Notification) -> str:
    """Where a record is stored: a final record under a key of its own, so compaction, which keeps
    the newest record of each key, never trades it for a stray attempt written after it."""
    key = notification_key(record.job_id, record.submission)
    return f"{key}/done" if record.kind in FINAL else key


def iso(us: int | None) -> str | None:
    return None if us is None else datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="seconds")


@dataclass
class NotificationState:
    """One notification as its log says so far."""

    job_id: str
    submission: int
    url: str
    owner: str | None = None  # the worker of the current claim
    claim_id: str | None = None  # the current claim
    lease_us: int = 0  # the current claim's lease
    last_activity_at: int = 0  # the owner's newest record under its current claim
    attempts: int = 0
    first_attempt_at: int | None = None
    last_attempt_at: int | None = None
    last_error: str | None = None
    http_status: int | None = None
    job_state: str | None = None
    delivered_at: int | None = None
    gave_up_at: int | None = None
    takeovers: int = 0

    @property
    def key(self) -> str:
        return notification_key(self.job_id, self.submission)

    @property
    def final(self) -> bool:
        return self.delivered_at is not None or self.gave_up_at is not None

    def claimable(self, now_us: int) -> bool:
        """Whether a claim made now would win: nobody owns it, or its owner has gone silent."""
        if self.final:
            return False
        return self.owner is None or now_us - self.last_activity_at > self.lease_us

    @property
    def phase(self) -> str:
        """pending (not attempted yet), failing (attempted, not delivered yet), delivered or gave_up."""
        if self.delivered_at is not None:
            return "delivered"
        if self.gave_up_at is not None:
            return "gave_up"
        return "failing" if self.attempts else "pending"

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.phase,
            "url": self.url,
            "idempotency_key": self.key,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "http_status": self.http_status,
            "last_attempt_at": iso(self.last_attempt_at),
            "delivered_at": iso(self.delivered_at),
            "gave_up_at": iso(self.gave_up_at),
            "worker": self.owner,
        }


def pending(job: Job) -> NotificationState:
    """The state of a notification nobody has written about yet."""
    return NotificationState(job.job_id, submission_of(job), job.terms.notify or "")


@dataclass
class NotificationLog:
    """The log folded in order; add() each record as it is read."""

    states: dict[str, NotificationState] = field(default_factory=dict)

    def get(self, key: str) -> NotificationState | None:
        return self.states.get(key)

    def add(self, record: Notification) -> None:
        key = notification_key(record.job_id, record.submission)
        state = self.states.get(key)
        if state is None:
            state = self.states[key] = NotificationState(record.job_id, record.submission, record.url)
        if state.final:
            return
        if record.kind == CLAIM:
            _claim(state, record)
            return
        if record.kind not in (RENEW, ATTEMPT, DELIVERED, GAVE_UP):
            return  # a kind a later version writes: not ours to judge
        if record.claim_id == state.claim_id:
            state.last_activity_at = max(state.last_activity_at, record.at)
        state.url = record.url
        state.attempts = max(state.attempts, record.attempts)
        if record.kind in (ATTEMPT, DELIVERED):
            _attempted(state, record)
        if record.kind == DELIVERED:
            state.delivered_at = record.at
        elif record.kind == GAVE_UP:
            state.gave_up_at = record.at
            state.last_error = record.error or state.last_error

    @classmethod
    def of(cls, records: Iterable[Notification]) -> NotificationLog:
        folded = cls()
        for record in records:
            folded.add(record)
        return folded


def _claim(state: NotificationState, claim: Notification) -> None:
    """The claim rules of the module's docstring; a claim that loses changes nothing."""
    if state.owner is not None and claim.worker != state.owner:
        if claim.at - state.last_activity_at <= state.lease_us:
            return
        state.takeovers += 1
    state.owner, state.claim_id = claim.worker, claim.claim_id
    state.lease_us, state.last_activity_at = claim.lease_ms * 1000, claim.at
    state.url = claim.url


def _attempted(state: NotificationState, attempt: Notification) -> None:
    """An attempt's outcome. Idempotent and order-blind: a worker folds its own records in when it
    writes them and again when it reads them back, after records that others wrote meanwhile."""
    first = state.first_attempt_at
    state.first_attempt_at = attempt.at if first is None else min(first, attempt.at)
    if state.last_attempt_at is None or attempt.at >= state.last_attempt_at:
        state.last_attempt_at = attempt.at
        state.last_error = attempt.error if attempt.kind == ATTEMPT else state.last_error
        state.http_status = attempt.http_status
        state.job_state = attempt.job_state or state.job_state
