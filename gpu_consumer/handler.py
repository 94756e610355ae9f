"""The pure core of the GPU worker: a window of consumed tensor records in, results and dead
letters out. No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpu_consumer.batcher import (
    BatchPolicy,
    PaddedBatch,
    bucket_of,
    carried_input,
    check_record_input,
    make_batch,
    plan_batches,
)
from gpu_consumer.engine import Engine, infer_all
from gpu_consumer.isolation import EngineFault, bisect, is_fault
from gpu_consumer.postprocess import postprocess
from kafka_io.dead_letters import dead_letter
from kafka_io.records import OutRecord, SourceRef, job_record
from kafka_io.settings import Topics
from schemas import InferenceResult, SerdeError, TensorRecord, decode, encode, now_us
from schemas.errors import TensorFormatError
from schemas.model_config import ModelConfig

STAGE = "inference"


@dataclass(frozen=True)
class Item:
    source: SourceRef
    record: TensorRecord
    array: np.ndarray  # the input the record carries (token ids or pixels)


@dataclass(frozen=True)
class Executed:
    items: list[Item]
    batch: PaddedBatch
    outputs: dict[str, np.ndarray]
    started_us: int
    finished_us: int


def handle_batch(
    sources: Sequence[SourceRef],
    engine: Engine,
    config: ModelConfig,
    topics: Topics,
    batch_id: str,
    policy: BatchPolicy | None = None,
) -> list[OutRecord]:
    """Run one poll window: decode, sort and cut into executed batches (batcher.plan_batches), infer.

    A record that cannot be decoded or fed to this model, or that makes the engine fail (found by
    bisecting its batch), is dead-lettered; the others get results. An engine that fails on
    everything raises EngineFault: not the records' fault, so nothing is dead-lettered.
    """
    formed = now_us()
    policy = policy or BatchPolicy(engine.max_batch_size)
    out: list[OutRecord] = []
    valid: list[Item] = []
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
        valid.append(Item(src, record, arrays[carried]))

    text = config.tokenizer is not None
    lengths = [len(item.array) if text else 0 for item in valid]
    planned = [[valid[i] for i in rows] for rows in plan_batches(lengths, policy, config.buckets, engine.pad_to_bucket)]
    executed, poison = _execute(engine, config, planned, formed)
    if len(poison) > 1 and not executed:
        engine.warmup()  # every record failed: if synthetic input fails too, the engine is broken
    out.extend(_dead(error, item.source, topics, config, item.record) for item, error in poison)

    for n, run in enumerate(executed):
        per_record = postprocess(config, run.outputs, run.batch)
        for row, item in enumerate(run.items):
            record = item.record
            result = InferenceResult(
                job_id=record.job_id,
                record_id=record.record_id,
                seq=record.seq,
                model=config.name,
                model_version=config.version,
                outputs=per_record[row].tensors,
                labels=per_record[row].labels,
                batch_id=f"{batch_id}.{n}",
                batch_size=run.batch.size,
                length=len(item.array) if text else 0,
                padded_length=run.batch.width,
                attributes=record.attributes,
                timestamps={
                    **record.timestamps,
                    "batch_formed": formed,
                    "inference_start": run.started_us,
                    "inference_end": run.finished_us,
                    "result_produced": now_us(),
                },
            )
            out.append(job_record(topics.results, encode(result), record.job_id, record.record_id))
    return out


def _batch_of(engine: Engine, config: ModelConfig, items: list[Item]) -> PaddedBatch:
    if config.tokenizer is None:
        return make_batch(config, [item.array for item in items])
    width = max(len(item.array) for item in items)
    if engine.pad_to_bucket:
        width = bucket_of(width, config.buckets)
    return make_batch(config, [item.array for item in items], width)


def _execute(
    engine: Engine, config: ModelConfig, planned: list[list[Item]], started: int
) -> tuple[list[Executed], list[tuple[Item, Exception]]]:
    """Infer every planned batch, pipelined while all goes well; a failing batch is bisected.

    Outputs are pulled one batch at a time, so a batch's inference time runs from the previous
    batch's outputs to its own; pipelined engines meanwhile copy in the next batch.
    """
    executed: list[Executed] = []
    poison: list[tuple[Item, Exception]] = []
    batches = [_batch_of(engine, config, items) for items in planned]
    pipelined = iter(infer_all(engine, [b.inputs for b in batches]))
    healthy = True
    for items, batch in zip(planned, batches, strict=True):
        if healthy:
            try:
                outputs = next(pipelined)
                finished = now_us()
                executed.append(Executed(items, batch, outputs, started, finished))
                started = finished
                continue
            except Exception as exc:
                if is_fault(exc):
                    raise EngineFault(f"{engine.name}: {exc}") from exc
                healthy = False  # the pipeline is spent: the rest runs batch by batch

        def run(rows: list[int], items: list[Item] = items) -> tuple[PaddedBatch, dict[str, np.ndarray]]:
            sub = _batch_of(engine, config, [items[i] for i in rows])
            return sub, engine.infer(sub.inputs)

        good, bad = bisect(run, list(range(len(items))))
        for rows, (sub, outputs) in good:
            finished = now_us()
            executed.append(Executed([items[i] for i in rows], sub, outputs, started, finished))
            started = finished
        poison.extend((items[i], error) for i, error in bad)
    return executed, poison


def _dead(
    error: Exception, src: SourceRef, topics: Topics, config: ModelConfig, record: TensorRecord | None
) -> OutRecord:
    ids = {"job_id": record.job_id, "record_id": record.record_id} if record else {}
    return dead_letter(STAGE, error, src, topics, model=config.name, model_version=config.version, **ids)
