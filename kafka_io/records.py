"""What a stage hands to the Kafka edge to produce. Kept free of client imports so pure code can build it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OutRecord:
    topic: str
    value: bytes | None  # None: a tombstone, which deletes the key from a compacted topic
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)


def job_record(topic: str, value: bytes, job_id: str, record_id: str, submission: int | None = None) -> OutRecord:
    """A record of a job as every stage writes it: key `job_id/record_id` (readers keep one per key),
    a `job_id` header and, from the submission on, a `submission` header (the submission's
    `submitted_at`, so a resubmitted job id is told apart from its cancelled predecessor);
    kafka_io.cancellations reads both without decoding the value."""
    headers = [("job_id", job_id.encode())]
    if submission is not None:
        headers.append(("submission", str(submission).encode()))
    return OutRecord(topic, value, f"{job_id}/{record_id}".encode(), headers)


@dataclass(frozen=True)
class SourceRef:
    """Where a consumed record came from: enough to dead-letter it or commit past it."""

    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None = None
