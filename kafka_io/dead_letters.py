"""The dead-letter record for a consumed record that a stage could not process."""

from __future__ import annotations

from kafka_io.metrics import count_dead_letter
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import Topics
from schemas import DeadLetter, encode


def dead_letter(
    stage: str,
    error: Exception,
    src: ConsumedRecord,
    topics: Topics,
    *,
    job_id: str | None = None,
    record_id: str | None = None,
    model: str | None = None,
    model_version: str | None = None,
) -> OutRecord:
    """The reason, the source coordinates and the untouched payload, keyed like the source."""
    count_dead_letter(stage, error)
    letter = DeadLetter.from_error(
        stage,
        error,
        (src.topic, src.partition, src.offset, src.value),
        job_id=job_id,
        record_id=record_id,
        model=model,
        model_version=model_version,
    )
    return OutRecord(topics.dead_letters, encode(letter), key=src.key)
