"""Schedulers on the real broker with an injected clock: one job per tick, misfire, pause/resume/rm."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from jobs.registry import JobStatus
from jobs.scheduling.cron import to_us
from jobs.scheduling.scheduler import Scheduler, SchedulerSettings
from jobs.scheduling.schedules import (
    ScheduleSpec,
    TickClaims,
    add_schedule,
    describe,
    load_ticks,
    new_schedule,
    remove_schedule,
    set_paused,
)
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import ensure_topics, schedule_ticks_topic
from kafka_io.topology import Topics
from schemas import JobTerms, ScheduleTick, encode
from tests.support.inputs import example_lines, write_jsonl
from tests.support.records import raw_texts_in
from tests.support.scheduling import T0, Clock, LoneScheduler, add, scheduled_jobs
from tests.support.waiting import wait_until


@pytest.fixture
def schedulers(settings: KafkaSettings, topics: Topics, clock: Clock) -> Iterator[list[Scheduler]]:
    with ExitStack() as stack:
        yield [
            stack.enter_context(Scheduler(settings, topics, SchedulerSettings(name), clock=clock))
            for name in ("sched-a", "sched-b")
        ]


def raw_records_of(settings: KafkaSettings, topics: Topics, job_id: str) -> int:
    return sum(1 for t in raw_texts_in(read_topics(settings, [topics.raw_text])) if t.job_id == job_id)


def test_the_first_claim_in_the_log_wins_so_two_racing_schedulers_submit_one_job(
    settings: KafkaSettings, topics: Topics, clock: Clock, text_input: Path, schedulers: list[Scheduler]
) -> None:
    a, b = schedulers
    add(settings, topics, text_input)
    a.catch_up()
    b.catch_up()
    tick = T0.replace(minute=1, second=0)
    # Both decide the tick is due before either has read the other's claim: the worst race.
    assert a.claim("hourly", tick) is True
    assert b.claim("hourly", tick) is False
    claims = [c for c in load_ticks(settings, topics) if c.schedule == "hourly"]
    assert [c.scheduler for c in claims] == ["sched-a", "sched-b"]
    assert claims[0].job_id == claims[1].job_id == "hourly-20261129T1001Z"


def test_two_schedulers_stepping_concurrently_submit_exactly_one_job_per_tick(
    settings: KafkaSettings, topics: Topics, clock: Clock, text_input: Path, schedulers: list[Scheduler]
) -> None:
    add(settings, topics, text_input)
    submitted: list[str] = []
    for minute in (1, 2, 3):
        clock.at(minute, 1)
        threads = [threading.Thread(target=lambda s=s: submitted.extend(s.step())) for s in schedulers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    expected = ["hourly-20261129T1001Z", "hourly-20261129T1002Z", "hourly-20261129T1003Z"]
    assert sorted(submitted) == expected
    jobs = scheduled_jobs(settings, topics)
    assert sorted(jobs) == expected
    assert {(j.schedule, j.total, j.attributes["tick"][11:16]) for j in jobs.values()} == {
        ("hourly", 5, "10:01"),
        ("hourly", 5, "10:02"),
        ("hourly", 5, "10:03"),
    }
    for job_id in expected:  # each tick's records were produced once, by the winner alone
        assert raw_records_of(settings, topics, job_id) == 5
    winners = TickClaims.of(load_ticks(settings, topics)).first
    assert len(winners) == 3


@pytest.mark.parametrize(
    ("misfire", "expected_ticks"), [("skip", ["1004"]), ("catch-up", ["1001", "1002", "1003", "1004"])]
)
def test_after_downtime_the_misfire_policy_decides_which_missed_ticks_run(
    settings: KafkaSettings,
    topics: Topics,
    clock: Clock,
    text_input: Path,
    misfire: str,
    expected_ticks: list[str],
) -> None:
    add(settings, topics, text_input, misfire=misfire)
    clock.at(4, 10)  # no scheduler ran from 10:00:20 until 10:04:10
    events: list[str] = []
    with Scheduler(settings, topics, SchedulerSettings("late"), clock=clock, on_event=events.append) as late:
        assert late.step() == [f"hourly-20261129T{t}Z" for t in expected_ticks]
        assert late.step() == []  # nothing twice
    assert sorted(scheduled_jobs(settings, topics)) == [f"hourly-20261129T{t}Z" for t in expected_ticks]
    if misfire == "skip":
        assert any("3 missed tick(s) from 2026-11-29 10:01 to 2026-11-29 10:03 UTC not run" in e for e in events)


def test_pause_resume_and_rm(
    settings: KafkaSettings, topics: Topics, clock: Clock, text_input: Path, schedulers: list[Scheduler]
) -> None:
    a, _ = schedulers
    add(settings, topics, text_input, misfire="catch-up")
    set_paused(settings, topics, "hourly", True)
    clock.at(1, 5)
    assert a.step() == []  # paused: the 10:01 tick does not run
    assert describe(settings, topics, clock())[0].to_dict()["state"] == "paused"

    set_paused(settings, topics, "hourly", False, at_us=to_us(T0.replace(minute=1, second=30)))
    clock.at(2, 3)
    # resumed at 10:01:30: 10:01 fell while paused and stays unrun even under catch-up
    assert a.step() == ["hourly-20261129T1002Z"]
    view = describe(settings, topics, clock())[0].to_dict()
    assert (view["state"], view["last_job_id"], view["next_tick"]) == (
        "active",
        "hourly-20261129T1002Z",
        "2026-11-29T10:03:00+00:00",
    )

    remove_schedule(settings, topics, "hourly")
    clock.at(3, 3)
    assert a.step() == []
    assert describe(settings, topics, clock()) == []
    assert sorted(scheduled_jobs(settings, topics)) == ["hourly-20261129T1002Z"]


def test_a_missing_input_fails_the_ticks_job_with_the_reason_and_the_schedule_goes_on(
    settings: KafkaSettings, topics: Topics, clock: Clock, tmp_path: Path, schedulers: list[Scheduler]
) -> None:
    a, _ = schedulers
    pattern = tmp_path / "drop" / "*.jsonl"
    add(settings, topics, pattern)
    clock.at(1, 2)
    assert a.step() == []
    failed = scheduled_jobs(settings, topics)["hourly-20261129T1001Z"]
    assert failed.error == f"{pattern}: matches no file"
    assert JobStatus(failed).state == "failed"

    (tmp_path / "drop").mkdir()
    write_jsonl(tmp_path / "drop" / "a.jsonl", example_lines(3))
    write_jsonl(tmp_path / "drop" / "b.jsonl", example_lines(4))
    clock.at(2, 2)
    assert a.step() == ["hourly-20261129T1002Z"]
    job = scheduled_jobs(settings, topics)["hourly-20261129T1002Z"]
    assert job.total == 7  # both files, one job


def test_a_restarted_winner_finishes_a_tick_it_claimed_but_did_not_submit(
    settings: KafkaSettings, topics: Topics, clock: Clock, text_input: Path
) -> None:
    add(settings, topics, text_input)
    tick = T0.replace(minute=1, second=0)
    # what a scheduler leaves behind when it dies between its claim and its submission
    orphan = ScheduleTick("hourly", to_us(tick), "hourly-20261129T1001Z", "sched-a", "c0ffee", to_us(tick))
    ensure_topics(settings, [schedule_ticks_topic(topics)])
    produce_all(make_producer(settings), [OutRecord(topics.schedule_ticks, encode(orphan), b"hourly@1001")])
    clock.at(1, 20)
    with Scheduler(settings, topics, SchedulerSettings("sched-b"), clock=clock) as other:
        assert other.step() == []  # not its claim: it neither submits nor steals it
    with Scheduler(settings, topics, SchedulerSettings("sched-a"), clock=clock) as restarted:
        assert restarted.step() == ["hourly-20261129T1001Z"]
        assert restarted.step() == []
    assert raw_records_of(settings, topics, "hourly-20261129T1001Z") == 5


@pytest.mark.long
@pytest.mark.timeout(300)
def test_a_running_scheduler_recovers_from_a_broker_restart_that_lost_everything(
    lone: LoneScheduler, clock: Clock, text_input: Path
) -> None:
    lone.broker.stop()
    lone.restart_broker()
    deadline = time.monotonic() + 120  # one bound for both waits: the outage seen, then the next tick's job
    wait_until(
        lambda: any("Kafka unavailable" in e for e in lone.events),
        deadline - time.monotonic(),
        lambda: f"'Kafka unavailable' among the scheduler's events: {lone.events}",
        every_s=0.5,
    )
    lone.submits_the_next_tick(text_input, clock, deadline)


def test_a_schedule_whose_input_has_non_object_attributes_fails_its_tick_and_the_others_run(
    settings: KafkaSettings, topics: Topics, clock: Clock, text_input: Path, tmp_path: Path
) -> None:
    (tmp_path / "cat.jpg").write_bytes(b"jpeg")
    bad = tmp_path / "images.jsonl"
    bad.write_text('{"id": "c", "image": "cat.jpg", "attributes": [1]}\n')
    add(settings, topics, bad, name="bad")
    add(settings, topics, text_input, name="good")
    # What the crash left: a claimed tick of "bad", retried first by the restarted scheduler.
    orphan = ScheduleTick("bad", to_us(T0.replace(minute=1, second=0)), "bad-20261129T1001Z", "a", "c0ffee", 1)
    ensure_topics(settings, [schedule_ticks_topic(topics)])
    produce_all(make_producer(settings), [OutRecord(topics.schedule_ticks, encode(orphan), b"bad@1001")])
    clock.at(1, 2)
    with Scheduler(settings, topics, SchedulerSettings("a"), clock=clock) as restarted:
        assert restarted.step() == ["good-20261129T1001Z"]
        clock.at(2, 2)
        assert restarted.step() == ["good-20261129T1002Z"]
    jobs = scheduled_jobs(settings, topics)
    reason = f'1 invalid record(s), first: {bad}:1: "attributes" must be an object, got array'
    for tick in ("1001", "1002"):
        assert jobs[f"bad-20261129T{tick}Z"].error == reason
        assert JobStatus(jobs[f"bad-20261129T{tick}Z"]).state == "failed"
        assert jobs[f"good-20261129T{tick}Z"].total == 5


def test_an_unexpected_error_in_one_schedule_fails_its_tick_and_never_stops_the_others(
    settings: KafkaSettings,
    topics: Topics,
    clock: Clock,
    text_input: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import jobs.scheduling.scheduler

    broken = write_jsonl(tmp_path / "broken.jsonl", example_lines(2))
    real_submit = jobs.scheduling.scheduler.submit

    def submit_with_a_bug(settings: KafkaSettings, topics: Topics, source: Any, *args: Any, **kwargs: Any) -> Any:
        if source.path == broken:
            raise TypeError("a bug met only on this input")
        return real_submit(settings, topics, source, *args, **kwargs)

    monkeypatch.setattr(jobs.scheduling.scheduler, "submit", submit_with_a_bug)
    add(settings, topics, broken, name="broken")
    add(settings, topics, text_input, name="fine")
    events: list[str] = []
    clock.at(1, 2)
    with Scheduler(settings, topics, SchedulerSettings("a"), clock=clock, on_event=events.append) as scheduler:
        assert scheduler.step() == ["fine-20261129T1001Z"]
    jobs_ = scheduled_jobs(settings, topics)
    assert jobs_["broken-20261129T1001Z"].error == "internal error: TypeError: a bug met only on this input"
    assert jobs_["fine-20261129T1001Z"].total == 5
    assert any("broken" in e and "failed: internal error" in e for e in events)


def test_a_glob_of_parquet_files_is_one_job_per_tick_read_with_the_schedules_columns(
    settings: KafkaSettings, topics: Topics, clock: Clock, tmp_path: Path, schedulers: list[Scheduler]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from producers.table_rows import Columns
    from results.kept_columns import KeptColumns

    a, _ = schedulers
    (tmp_path / "drop").mkdir()
    pq.write_table(pa.table({"body": ["a", "b"], "n": [1, 2]}), tmp_path / "drop" / "1.parquet")
    pq.write_table(pa.table({"body": ["c"], "n": [3]}), tmp_path / "drop" / "2.parquet")
    columns = Columns(text="body", keep=("n",))
    pattern = str(tmp_path / "drop" / "*.parquet")
    schedule = new_schedule(ScheduleSpec("tables", "* * * * *", pattern, "tiny", columns=columns), to_us(T0))
    add_schedule(settings, topics, schedule)
    clock.at(1, 2)
    assert a.step() == ["tables-20261129T1001Z"]
    job = scheduled_jobs(settings, topics)["tables-20261129T1001Z"]
    assert job.total == 3 and job.error is None
    kept = KeptColumns.of(job.columns)
    assert kept is not None and kept.schema.field("n").type == pa.int64()
    assert raw_records_of(settings, topics, job.job_id) == 3


def test_a_live_schedule_submits_its_jobs_in_the_live_lane(
    settings: KafkaSettings, topics: Topics, clock: Clock, text_input: Path, schedulers: list[Scheduler]
) -> None:
    a, _ = schedulers
    schedule = new_schedule(ScheduleSpec("urgent", "* * * * *", str(text_input), "tiny", priority="live"), to_us(T0))
    add_schedule(settings, topics, schedule)
    assert [v.to_dict()["priority"] for v in describe(settings, topics, T0) if v.schedule.name == "urgent"] == ["live"]
    clock.at(1, 2)
    assert a.step() == ["urgent-20261129T1001Z"]
    job = scheduled_jobs(settings, topics)["urgent-20261129T1001Z"]
    assert job.priority == "live" and job.total == 5
    assert raw_records_of(settings, topics, job.job_id) == 0  # nothing in the bulk lane
    live = topics.lane(topics.raw_text, "live")
    assert sum(1 for t in raw_texts_in(read_topics(settings, [live])) if t.job_id == job.job_id) == 5


def test_a_schedules_labels_window_and_webhook_go_on_every_job_it_submits(
    settings: KafkaSettings, topics: Topics, clock: Clock, tmp_path: Path, schedulers: list[Scheduler]
) -> None:
    """And an OpenAI batch file is read as one at each tick, its requests' inputs the job's records."""
    requests = [
        {"custom_id": f"q{i}", "method": "POST", "url": "/v1/embeddings", "body": {"model": "tiny", "input": [t, t]}}
        for i, t in enumerate(row["text"] for row in example_lines(3))
    ]
    batch = write_jsonl(tmp_path / "batch.jsonl", requests)
    terms = JobTerms({"team": "search"}, 3600.0, "http://127.0.0.1:9/hook")
    spec = ScheduleSpec("nightly", "* * * * *", str(batch), "tiny", terms=terms)
    add_schedule(settings, topics, new_schedule(spec, to_us(T0)))
    listed = [v.to_dict() for v in describe(settings, topics, T0) if v.schedule.name == "nightly"]
    assert listed[0]["labels"] == {"team": "search"} and listed[0]["complete_within_s"] == 3600.0
    a, _ = schedulers
    clock.at(1, 2)
    assert a.step() == ["nightly-20261129T1001Z"]
    job = scheduled_jobs(settings, topics)["nightly-20261129T1001Z"]
    assert job.terms == terms  # the window too, kept beside the deadline it gave
    assert job.submission is not None and job.deadline_at == job.submission + 3_600_000_000
    assert job.total == 6


def test_a_ticks_job_that_fails_has_its_schedules_labels_and_webhook(
    settings: KafkaSettings, topics: Topics, clock: Clock, tmp_path: Path, schedulers: list[Scheduler]
) -> None:
    """Found by its labels and told to the webhook as a job the schedule submitted would be."""
    terms = JobTerms({"team": "search"}, None, "http://127.0.0.1:9/hook", reuse=False)
    spec = ScheduleSpec(
        "nightly", "* * * * *", str(tmp_path / "drop" / "*.jsonl"), "tiny", priority="live", terms=terms
    )
    add_schedule(settings, topics, new_schedule(spec, to_us(T0)))
    a, _ = schedulers
    clock.at(1, 2)
    assert a.step() == []
    failed = scheduled_jobs(settings, topics)["nightly-20261129T1001Z"]
    assert failed.error is not None and failed.error.endswith("matches no file")
    assert failed.terms == terms and failed.priority == "live"


def test_rows_of_instants_no_datetime_holds_never_stop_the_scheduler(
    settings: KafkaSettings, topics: Topics, clock: Clock, text_input: Path
) -> None:
    """Any producer may write to the schedule logs: a schedule active since 2**62 us, a claim of a
    tick at 2**62 us (one of its own instance, so it would finish it) raised in every step, at every
    restart, as the compacted logs keep them. The scheduler goes on, and the other schedules tick."""
    from dataclasses import replace

    add(settings, topics, text_input, name="fine")
    add(settings, topics, text_input, name="claimed")
    spec = ScheduleSpec("future", "* * * * *", str(text_input), "tiny")
    add_schedule(settings, topics, replace(new_schedule(spec, to_us(T0)), active_since=2**62))
    forged = [
        ScheduleTick("claimed", 2**62, "claimed-x", "sched-a", "c0ffee", to_us(T0)),
        ScheduleTick("fine", -(2**62), "fine-x", "sched-a", "c0ffee", to_us(T0)),
    ]
    ensure_topics(settings, [schedule_ticks_topic(topics)])
    produce_all(
        make_producer(settings),
        [OutRecord(topics.schedule_ticks, encode(t), f"{t.schedule}@{t.tick_at}".encode()) for t in forged],
    )
    clock.at(1, 2)
    with Scheduler(settings, topics, SchedulerSettings("sched-a"), clock=clock) as scheduler:
        submitted = scheduler.step()
        assert "fine-20261129T1001Z" in submitted
        assert not [j for j in submitted if j.startswith("future")]
        assert scheduler.step() == []
    views = {v.schedule.name: v.to_dict() for v in describe(settings, topics, clock())}  # `schedule list`
    assert views["future"]["active_since"] == "9999-12-31T23:59:59+00:00"
    assert views["claimed"]["last_tick"] == "9999-12-31T23:59:59+00:00"
