"""The pure core of the GPU worker: a window of consumed tensor records in, results and dead
letters out. No I/O."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpu_consumer.batcher import BatchPolicy, carried_input, check_record_input, make_batch, plan_batches
from gpu_consumer.engine import Engine, infer_all
from gpu_consumer.postprocess import postprocess
from kafka_io.dead_letters import dead_letter
from kafka_io.records import OutRecord, SourceRef
from kafka_io.settings import Topics
from schemas import InferenceResult, SerdeError, TensorRecord, decode, encode, now_us
from schemas.errors import TensorFormatError
from schemas.model_config import ModelConfig

STAGE = "inference"


def handle_batch(
    sources: Sequence[SourceRef],
    engine: Engine,
    config: ModelConfig,
    topics: Topics,
    batch_id: str,
    policy: BatchPolicy | None = None,
) -> list[OutRecord]:
    """Run one poll window: decode, sort and cut into executed batches (batcher.plan_batches), infer.

    A record that cannot be decoded or fed to this model is dead-lettered; an engine failure is
    raised, since it is not the records' fault.
    """
    formed = now_us()
    policy = policy or BatchPolicy(engine.max_batch_size)
    out: list[OutRecord] = []
    valid: list[tuple[TensorRecord, np.ndarray]] = []
    carried = carried_input(config).name
    for src in sources:
        record: TensorRecord | None = None
        try:
            record = decode(src.value, TensorRecord)
            if record.model != config.name:
                raise TensorFormatError(f"record is for model {record.model!r}, this worker serves {config.name!r}")
            arrays = record.arrays()
            if carried not in arrays:
                raise TensorFormatError(f"record has no {carried!r} tensor (has {sorted(arrays)})")
            check_record_input(config, arrays[carried])
        except SerdeError as exc:
            out.append(_dead(exc, src, topics, config, record))
            continue
        valid.append((record, arrays[carried]))

    text = config.tokenizer is not None
    lengths = [len(array) if text else 0 for _, array in valid]
    planned = []
    for rows in plan_batches(lengths, policy, config.buckets, engine.pad_to_bucket):
        items = [valid[i] for i in rows]
        width = max(lengths[i] for i in rows)
        if text and engine.pad_to_bucket:
            width = next((b for b in config.buckets if b >= width), width)
        planned.append((items, make_batch(config, [array for _, array in items], width if text else None)))
    started = now_us()
    # Outputs are pulled one batch at a time, so a batch's inference time runs from the end of the
    # previous batch's postprocessing to its own outputs; pipelined engines meanwhile copy in the next.
    outputs_per_batch = infer_all(engine, [b.inputs for _, b in planned])
    for n, ((items, batch), outputs) in enumerate(zip(planned, outputs_per_batch, strict=True)):
        finished = now_us()
        per_record = postprocess(config, outputs, batch)
        for row, (record, array) in enumerate(items):
            result = InferenceResult(
                job_id=record.job_id,
                record_id=record.record_id,
                seq=record.seq,
                model=config.name,
                model_version=config.version,
                outputs=per_record[row].tensors,
                labels=per_record[row].labels,
                batch_id=f"{batch_id}.{n}",
                batch_size=batch.size,
                length=len(array) if text else 0,
                padded_length=batch.width,
                attributes=record.attributes,
                timestamps={
                    **record.timestamps,
                    "batch_formed": formed,
                    "inference_start": started,
                    "inference_end": finished,
                    "result_produced": now_us(),
                },
            )
            out.append(
                OutRecord(
                    topics.results,
                    encode(result),
                    key=f"{record.job_id}/{record.record_id}".encode(),
                    headers=[("job_id", record.job_id.encode())],
                )
            )
        started = now_us()
    return out


def _dead(
    error: Exception, src: SourceRef, topics: Topics, config: ModelConfig, record: TensorRecord | None
) -> OutRecord:
    ids = {"job_id": record.job_id, "record_id": record.record_id} if record else {}
    return dead_letter(STAGE, error, src, topics, model=config.name, model_version=config.version, **ids)
