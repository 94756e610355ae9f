"""The dead-letter record for a consumed record that a stage could not process."""

from __future__ import annotations

from dataclasses import dataclass

from kafka_io.metrics import count_dead_letter
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.topology import Topics
from schemas import DeadLetter, encode


@dataclass(frozen=True)
class Whose:
    """The record a dead letter stands for, as far as the stage could tell (None: unknown)."""

    job_id: str | None = None
    record_id: str | None = None
    model: str | None = None
    model_version: str | None = None


def dead_letter(
    stage: str,
    error: Exception,
    src: ConsumedRecord,
    topics: Topics,
    whose: Whose | None = None,
    packed: tuple[int, bytes] | None = None,
) -> OutRecord:
    """The reason, the source coordinates and the untouched payload, keyed like the source.

    `packed`: the record is one of the pack `src` holds, (its index in the pack, the record alone
    as a single record of the source topic's kind), which is the payload: replayed, it is a record
    of its own (schemas/packs.py)."""
    count_dead_letter(stage, error)
    whose = whose or Whose()
    job_id, record_id = whose.job_id, whose.record_id
    index, value = packed if packed is not None else (None, src.value)
    letter = DeadLetter.from_error(
        stage,
        error,
        (src.topic, src.partition, src.offset, value),
        job_id=job_id,
        record_id=record_id,
        model=whose.model,
        model_version=whose.model_version,
        index=index,
    )
    # a packed record's letter is keyed as the record itself would be (kafka_io.records.job_record)
    key = f"{job_id}/{record_id}".encode() if packed is not None and job_id and record_id else src.key
    return OutRecord(topics.dead_letters, encode(letter), key=key)
