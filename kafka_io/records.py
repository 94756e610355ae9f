"""What a stage hands to the Kafka edge to produce. Kept free of client imports so pure code can build it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OutRecord:
    topic: str
    value: bytes | None  # None: a tombstone, which deletes the key from a compacted topic
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)


def job_record(topic: str, value: bytes, job_id: str, record_id: str) -> OutRecord:
    """A record of a job as every stage writes it: key `job_id/record_id` (readers keep one per key)
    and a `job_id` header (kafka_io.cancellations.job_of reads it without decoding the value)."""
    return OutRecord(topic, value, f"{job_id}/{record_id}".encode(), [("job_id", job_id.encode())])


@dataclass(frozen=True)
class SourceRef:
    """Where a consumed record came from: enough to dead-letter it or commit past it."""

    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None = None
