"""Which records the workers skip once a job's --complete-within deadline has passed: the rules of
kafka_io/cancellations.py applied to registry rows as they are read, without a broker (the broker
trial is tests/trials/test_cancellations_on_kafka.py)."""

from __future__ import annotations

from dataclasses import replace

from kafka_io.cancellations import Cancellations
from kafka_io.records import ConsumedRecord, job_record
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from schemas import Job, encode, now_us

PAST, FUTURE = now_us() - 1_000_000, now_us() + 3_600_000_000


def following(*rows: Job) -> Cancellations:
    """A follower (never started) that has read these registry rows, in order."""
    skips = Cancellations(KafkaSettings("127.0.0.1:1"), Topics(""))
    for offset, row in enumerate(rows):
        skips._apply(ConsumedRecord("jobs", 0, offset, encode(row), row.job_id.encode()))
    return skips


def job(job_id: str, submission: int, deadline_at: int | None) -> Job:
    return Job(job_id, "minilm", "in.jsonl", "text", 10, submission, submission=submission, deadline_at=deadline_at)


def headers(job_id: str, submission: int | None) -> tuple[tuple[str, bytes | None], ...]:
    return tuple(job_record("raw.text", b"", job_id, "r1", submission).headers)


def test_a_submission_past_its_deadline_is_skipped_and_one_before_it_is_not() -> None:
    skips = following(job("late", 1, PAST), job("early", 2, FUTURE), job("none", 3, None))
    assert skips.skips(headers("late", 1)) and skips.skips_submission("late", 1)
    assert not skips.skips(headers("early", 2)) and not skips.skips_submission("early", 2)
    assert not skips.skips(headers("none", 3))
    assert not skips.skips(headers("other", 4))  # a job the registry does not hold runs


def test_the_deadline_is_per_submission_and_records_without_one_follow_the_latest_row() -> None:
    first = job("again", 1, PAST)
    skips = following(first, replace(first, submission=2, submitted_at=2, deadline_at=None))
    assert skips.skips(headers("again", 1))  # the expired submission's records stay skipped
    assert not skips.skips(headers("again", 2))  # the new submission has no deadline
    assert not skips.skips(headers("again", None))  # a record from before submissions: the latest row


def test_headers_a_foreign_producer_garbled_are_asked_without_raising() -> None:
    """Once any job has a deadline every record's headers are read: a job header that is not
    UTF-8, or a submission of 5,000 digits, raised there, in the worker's poll loop, at every
    redelivery of that record. They read as absent: the record is not skipped."""
    skips = following(job("late", 1, PAST))
    assert not skips.skips((("job_id", b"\xff\xfe"), ("submission", b"1")))
    assert skips.skips((("job_id", b"late"), ("submission", b"9" * 5000)))  # no submission: the job's latest row
