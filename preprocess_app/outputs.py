"""The two things a preprocessing step emits: a tensor record, or a dead letter with the reason."""

from __future__ import annotations

from kafka_io.dead_letters import Whose, dead_letter
from kafka_io.limits import MAX_VALUE_BYTES, too_large
from kafka_io.records import ConsumedRecord, OutRecord, job_record
from kafka_io.topology import Topics
from preprocess_app.lanes import topic_lane
from schemas import RawImage, RawText, TensorRecord, encode
from schemas.packs import RawTextPack
from schemas.raw_text_bytes import RawTextParts

STAGE = "preprocess"


def tensor_out(topics: Topics, record: TensorRecord, src: ConsumedRecord, raw: RawText | RawImage) -> OutRecord:
    """The tensor record, or a dead letter when it is over the record limit (encoded_tensor_out)."""
    return encoded_tensor_out(topics, encode(record), record.model, src, raw, record.timestamps.get("submitted"))


def encoded_tensor_out(
    topics: Topics,
    value: bytes,
    model: str,
    src: ConsumedRecord,
    raw: RawText | RawTextParts | RawImage,
    submission: int | None,
) -> OutRecord:
    """A tensor record's bytes as its OutRecord, or a dead letter when it is over the record limit:
    the broker would refuse it on every redelivery, and the worker must not stop on a record's size."""
    if len(value) > MAX_VALUE_BYTES:
        return dead_out(too_large(f"the tensor record of {raw.record_id}", len(value)), src, topics, raw)
    # the record's lane is the topic it came in: its tensors go on in that lane
    tensors = topics.lane(topics.tensors(model), topic_lane(topics, src.topic))
    return job_record(tensors, value, raw.job_id, raw.record_id, submission)


def dead_out(
    error: Exception,
    src: ConsumedRecord,
    topics: Topics,
    raw: RawText | RawTextParts | RawImage | RawTextPack | None = None,
    *,
    packed: int | None = None,
) -> OutRecord:
    """The dead letter of `src` (with `raw`, what could be read of it), or with `packed`, of record
    `packed` of the pack `raw` alone: its payload that record as a single RawText (schemas/packs.py)."""
    if isinstance(raw, RawTextPack):
        if packed is None:
            raise ValueError("a pack's dead letter names the record of it that failed (packed=index)")
        whose = Whose(raw.job_id, raw.record_ids[packed], raw.model)
        return dead_letter(STAGE, error, src, topics, whose, (packed, raw.single(packed)))
    if raw is None:  # undecodable (not Avro, or the other kind): the headers and key still name it
        job_id = src.job_id
        prefix = f"{job_id}/"
        record_id = src.key_text.removeprefix(prefix) if job_id and src.key_text.startswith(prefix) else None
        return dead_letter(STAGE, error, src, topics, Whose(job_id, record_id))
    return dead_letter(STAGE, error, src, topics, Whose(raw.job_id, raw.record_id, raw.model))
