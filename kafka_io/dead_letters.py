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
    packed: tuple[int, bytes] | None = None,
) -> OutRecord:
    """The reason, the source coordinates and the untouched payload, keyed like the source.

    `packed`: the record is one of the pack `src` holds, (its index in the pack, the record alone
    as a single record of the source topic's kind), which is the payload: replayed, it is a record
    of its own (schemas/packs.py)."""
    count_dead_letter(stage, error)
    index, value = packed if packed is not None else (None, src.value)
    letter = DeadLetter.from_error(
        stage,
        error,
        (src.topic, src.partition, src.offset, value),
        job_id=job_id,
        record_id=record_id,
        model=model,
        model_version=model_version,
        index=index,
    )
    # a packed record's letter is keyed as the record itself would be (kafka_io.records.job_record)
    key = f"{job_id}/{record_id}".encode() if packed is not None and job_id and record_id else src.key
    return OutRecord(topics.dead_letters, encode(letter), key=key)
