"""The two things a preprocessing step emits: a tensor record, or a dead letter with the reason."""

from __future__ import annotations

from kafka_io.records import OutRecord, SourceRef
from kafka_io.settings import Topics
from schemas import DeadLetter, RawImage, RawText, TensorRecord, encode

STAGE = "preprocess"


def record_key(job_id: str, record_id: str) -> bytes:
    return f"{job_id}/{record_id}".encode()


def tensor_out(topics: Topics, record: TensorRecord) -> OutRecord:
    return OutRecord(
        topics.tensors(record.model),
        encode(record),
        key=record_key(record.job_id, record.record_id),
        headers=[("job_id", record.job_id.encode())],
    )


def dead_out(error: Exception, src: SourceRef, topics: Topics, raw: RawText | RawImage | None = None) -> OutRecord:
    letter = DeadLetter.from_error(
        STAGE,
        error,
        (src.topic, src.partition, src.offset, src.value),
        job_id=raw.job_id if raw else None,
        record_id=raw.record_id if raw else None,
        model=raw.model if raw else None,
    )
    return OutRecord(topics.dead_letters, encode(letter), key=src.key)
