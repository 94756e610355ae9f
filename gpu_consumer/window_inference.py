"""A window's inference, the pure core of the GPU worker: a window of consumed tensor records in,
results and dead letters out. No I/O.

Three steps, so the worker can overlap them (gpu_consumer/pipeline.py) while tests and
`reprocess` run them one after the other (handle_window):

    prepare(sources)  -> Window     decode, check, sort by length, cut into padded batches (CPU)
    execute(window)   -> Executed…  the engine, batch by batch; a failing batch is bisected
    Emitter.results() -> OutRecord… postprocess and encode each executed batch's results (CPU)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpu_consumer.batcher import (
    BatchSettings,
    PaddedBatch,
    bucket_of,
    carried_input,
    check_input_dtype,
    check_record_input,
    make_batch,
    plan_batches,
)
from gpu_consumer.cache_writes import CacheWrites, runtime_of
from gpu_consumer.engines.protocol import Engine, infer_all
from gpu_consumer.isolation import EngineFault, bisect, is_fault
from gpu_consumer.postprocess import postprocess
from gpu_consumer.vocabulary import check_ids, vocabulary_size
from kafka_io.dead_letters import Whose, dead_letter
from kafka_io.limits import MAX_VALUE_BYTES, too_large
from kafka_io.records import ConsumedRecord, OutRecord, job_record, reuse_keys_of
from kafka_io.topology import Topics
from model_repository.config import ModelConfig
from schemas import SerdeError, now_us
from schemas.errors import NotUtf8Error, TensorFormatError
from schemas.packs import TensorPack, kind_of, read_tensor_pack
from schemas.records import tensor_array
from schemas.result_encoding import ResultEncoder, avro_long, avro_string, encoded_ids, encoded_maps
from schemas.tensor_record_bytes import TensorRecordParts, read_tensor_record

STAGE = "inference"


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs a microsecond per record
class Item:
    """A decoded tensor record: what its result needs, and the input it carries."""

    source: ConsumedRecord
    job_id: str
    record_id: str
    seq: int
    array: np.ndarray  # token ids or pixels
    attributes: Mapping[str, str]  # read-only: records of the same maps share them
    timestamps: Mapping[str, int]
    # The record's ids and maps as its bytes hold them, which its result repeats
    # (schemas/tensor_record_bytes.py); None: encoded from the fields above when it is written.
    ids: bytes | None = None
    maps: bytes | None = None
    # The pack the record came in and its index there (None: a single record): a record of a
    # pack that fails is dead-lettered alone, as the single record pack.single(index) makes.
    pack: TensorPack | None = None
    index: int = 0
    reuse_key: bytes | None = None  # its result is cached under it (kafka_io.records.REUSE_KEYS_HEADER)

    def packed(self) -> tuple[int, bytes] | None:
        """For a dead letter: (its index in the pack, the record alone), made only when one is written."""
        return (self.index, self.pack.single(self.index)) if self.pack is not None else None


@dataclass(frozen=True)
class Planned:
    """An executed batch before the engine: its records and their padded inputs."""

    items: list[Item]
    batch: PaddedBatch


@dataclass(frozen=True)
class Window:
    """A poll window with all the CPU work before the engine done."""

    window_id: str
    formed_us: int
    planned: list[Planned]
    dead: list[OutRecord]  # records that could not be decoded or fed to this model


@dataclass(frozen=True)
class Executed:
    items: list[Item]
    batch: PaddedBatch
    outputs: dict[str, np.ndarray]
    started_us: int
    finished_us: int


@dataclass(frozen=True)
class Poisoned:
    item: Item
    error: Exception


def prepare(
    sources: Sequence[ConsumedRecord],
    engine: Engine,
    config: ModelConfig,
    topics: Topics,
    window_id: str,
    policy: BatchSettings | None = None,
) -> Window:
    """Decode and check every record, sort by length and cut into padded batches (plan_batches).

    A source is a TensorPack (many records of one job, schemas/packs.py) or a single TensorRecord
    (image models, foreign producers, dlq replays). A record that cannot be decoded or fed to this
    model is dead-lettered here; a record of a pack alone, its neighbours run."""
    formed = now_us()
    policy = policy or BatchSettings(engine.max_batch_size)
    valid, dead = decode_sources(sources, config, topics)
    text = config.tokenizer is not None
    lengths = [len(item.array) if text else 0 for item in valid]
    planned = []
    for rows in plan_batches(lengths, policy, config.buckets, engine.pad_to_bucket):
        items = [valid[i] for i in rows]
        planned.append(Planned(items, _batch_of(engine, config, items)))
    return Window(window_id, formed, planned, dead)


def decode_sources(
    sources: Sequence[ConsumedRecord], config: ModelConfig, topics: Topics
) -> tuple[list[Item], list[OutRecord]]:
    """Every record of `sources` decoded and checked against the model: (the valid records, dead
    letters of the others). A record of a pack that fails is dead-lettered alone."""
    dead: list[OutRecord] = []
    valid: list[Item] = []
    spec = carried_input(config)
    carried = spec.name
    vocabulary = vocabulary_size(config) if spec.role == "token_ids" else None
    for src in sources:
        if kind_of(src.value) == "TensorPack":
            _prepare_pack(src, config, topics, valid, dead, vocabulary)
            continue
        parts: TensorRecordParts | None = None
        try:
            parts = read_tensor_record(src.value)
            if parts.model != config.name:
                raise TensorFormatError(f"record is for model {parts.model!r}, this worker serves {config.name!r}")
            array = None
            for name, dtype, shape, data in parts.tensors:
                if name == carried:
                    array = tensor_array(name, dtype, shape, data)
            if array is None:
                raise TensorFormatError(f"record has no {carried!r} tensor (has {sorted(t[0] for t in parts.tensors)})")
            check_record_input(config, array, spec)
            check_ids(carried, array, vocabulary)
        except SerdeError as exc:
            ids = {"job_id": parts.job_id, "record_id": parts.record_id} if parts else {}
            dead.append(_dead(exc, src, topics, config, ids))
            continue
        valid.append(
            Item(
                src,
                parts.job_id,
                parts.record_id,
                parts.seq,
                array,
                parts.attributes,
                parts.timestamps,
                parts.ids,
                parts.maps,
                reuse_key=_one_key(src),
            )
        )
    return valid, dead


def _prepare_pack(
    src: ConsumedRecord,
    config: ModelConfig,
    topics: Topics,
    valid: list[Item],
    dead: list[OutRecord],
    vocabulary: int | None,
) -> None:
    """The records of the pack `src` holds into `valid`, or dead-lettered alone into `dead`.

    What a pack's records share (model, tensor, dtype, the job and its stamps) is checked and
    encoded once; a record costs its length check, a view on its ids, its ids' bytes and an Item.
    A pack that cannot be read at all is dead-lettered whole: it names no record to key it by."""
    try:
        pack = read_tensor_pack(src.value)
    except SerdeError as exc:
        dead.append(_dead(exc, src, topics, config, {}))
        return
    job_id, record_ids, attributes, timestamps = pack.job_id, pack.record_ids, pack.attributes, pack.timestamps
    try:
        spec = carried_input(config)
        if pack.model != config.name:
            raise TensorFormatError(f"pack is for model {pack.model!r}, this worker serves {config.name!r}")
        if pack.tensor != spec.name:
            raise TensorFormatError(f"pack carries tensor {pack.tensor!r}, model {config.name} takes {spec.name!r}")
        if spec.role != "token_ids":
            raise TensorFormatError(f"a pack carries token ids; model {config.name} takes {spec.role}")
        check_input_dtype(config, pack.ids.dtype, spec)
    except TensorFormatError as exc:  # every record of the pack is unfit: each dead-lettered alone
        for i, record_id in enumerate(record_ids):
            ids = {"job_id": job_id, "record_id": record_id}
            dead.append(_dead(exc, src, topics, config, ids, (i, pack.single(i))))
        return
    job = avro_string(job_id)  # a result's ids are the job's, then the record's id and seq
    bare = encoded_maps({}, timestamps)  # most records have no attributes: their maps are the pack's stamps
    ids_of, offsets, seqs = pack.ids, pack.offsets.tolist(), pack.seqs.tolist()
    keys = reuse_keys_of(src.headers, len(record_ids))
    longest = config.max_length
    try:
        check_ids(spec.name, ids_of, vocabulary)  # once a pack; record by record only if it fails
        suspect = None
    except TensorFormatError:
        suspect = vocabulary
    for i, record_id in enumerate(record_ids):
        start, end = offsets[i], offsets[i + 1]
        error: SerdeError | None = None
        if i in pack.undecodable:  # its id or attributes are not UTF-8: dead-lettered alone
            error = NotUtf8Error(pack.undecodable[i][0])
        elif not 0 < end - start <= longest:
            error = TensorFormatError(f"{spec.name}: {end - start} tokens, model {config.name} takes 1 to {longest}")
        elif suspect is not None:
            try:
                check_ids(spec.name, ids_of[start:end], suspect)
            except TensorFormatError as exc:
                error = exc
        if error is not None:
            ids = {"job_id": job_id, "record_id": record_id}
            dead.append(_dead(error, src, topics, config, ids, (i, pack.single(i))))
            continue
        attrs = attributes[i]
        seq = seqs[i]
        valid.append(
            Item(
                src,
                job_id,
                record_id,
                seq,
                ids_of[start:end],
                attrs,
                timestamps,
                job + avro_string(record_id) + avro_long(seq),
                encoded_maps(attrs, timestamps) if attrs else bare,
                pack,
                i,
                keys[i] if keys is not None else None,
            )
        )


def _one_key(src: ConsumedRecord) -> bytes | None:
    keys = reuse_keys_of(src.headers, 1)
    return keys[0] if keys is not None else None


def execute(engine: Engine, window: Window, config: ModelConfig) -> Iterator[Executed | Poisoned]:
    """Infer every planned batch in order, pipelined while all goes well; a failing batch is bisected.

    Outputs are pulled one batch at a time, so a batch's inference time runs from the previous
    batch's outputs to its own; pipelined engines meanwhile copy in the next batch. An engine
    that fails on everything raises EngineFault: not the records' fault, so nothing is poisoned.
    """
    started = now_us()
    pipelined = iter(infer_all(engine, [p.batch.inputs for p in window.planned]))
    healthy = True
    executed = poisoned = 0
    for planned in window.planned:
        if healthy:
            try:
                outputs = next(pipelined)
                finished = now_us()
                yield Executed(planned.items, planned.batch, outputs, started, finished)
                executed += 1
                started = finished
                continue
            except Exception as exc:
                if is_fault(exc):
                    raise EngineFault(f"{engine.name}: {exc}") from exc
                healthy = False  # the pipeline is spent: the rest runs batch by batch

        def run(rows: list[int], items: list[Item] = planned.items) -> tuple[PaddedBatch, dict[str, np.ndarray]]:
            sub = _batch_of(engine, config, [items[i] for i in rows])
            return sub, engine.infer(sub.inputs)

        good, bad = bisect(run, list(range(len(planned.items))))
        for rows, (sub, outputs) in good:
            finished = now_us()
            yield Executed([planned.items[i] for i in rows], sub, outputs, started, finished)
            executed += 1
            started = finished
        for i, error in bad:
            yield Poisoned(planned.items[i], error)
            poisoned += 1
    if poisoned > 1 and not executed:
        engine.warmup()  # every record failed: if synthetic input fails too, the engine is broken


class Emitter:
    """Executed batches to encoded result records (and poisoned records to dead letters)."""

    def __init__(self, config: ModelConfig, topics: Topics, runtime: str, done: Sequence[str] = ()) -> None:
        """runtime: the engine's (cache_writes.runtime_of), whose keys its results are cached under."""
        self.config, self.topics, self.done = config, topics, tuple(done)
        self._encoder = ResultEncoder(config.name, config.version)
        self.cache = CacheWrites(topics, config.name, runtime)
        self._text = config.tokenizer is not None
        # An image's length is the pixels the engine ran (its crop), counted as a job's usage
        self._pixels = config.image.crop * config.image.crop if config.image is not None else 0

    def results(self, run: Executed, batch_id: str, formed_us: int) -> list[OutRecord]:
        out = postprocess(self.config, run.outputs, run.batch, self.done)
        items = run.items
        values = self._encoder.encode_batch(
            ids=[i.ids if i.ids is not None else encoded_ids(i.job_id, i.record_id, i.seq) for i in items],
            outputs=out.tensors,
            labels=out.labels,
            batch_id=batch_id,
            lengths=run.batch.lengths.tolist() if self._text else [self._pixels] * len(items),
            padded_length=run.batch.width,
            maps=[i.maps if i.maps is not None else encoded_maps(i.attributes, i.timestamps) for i in items],
            batch_timestamps={
                "batch_formed": formed_us,
                "inference_start": run.started_us,
                "inference_end": run.finished_us,
                "result_produced": now_us(),
            },
        )
        results = self.topics.results
        # The submission header is the result's own `submitted` stamp: readers that count a job
        # (submit --wait, status) then read its leading fields only (schemas/inference_result_bytes.py).
        return [
            job_record(results, value, i.job_id, i.record_id, i.timestamps.get("submitted"))
            if len(value) <= MAX_VALUE_BYTES
            # refused by the broker on every retry otherwise: a crash loop in the making
            else self._dead(too_large(f"the result of record {i.record_id}", len(value)), i)
            for i, value in zip(items, values, strict=True)
        ]

    def _dead(self, error: Exception, item: Item) -> OutRecord:
        ids = {"job_id": item.job_id, "record_id": item.record_id}
        return _dead(error, item.source, self.topics, self.config, ids, item.packed())

    def dead(self, poisoned: Poisoned) -> OutRecord:
        return self._dead(poisoned.error, poisoned.item)


def handle_window(
    sources: Sequence[ConsumedRecord],
    engine: Engine,
    config: ModelConfig,
    topics: Topics,
    window_id: str,
    policy: BatchSettings | None = None,
    on_executed: Callable[[Executed], None] = lambda run: None,
) -> list[OutRecord]:
    """prepare, execute and emit one window, one step after the other: results and dead letters.
    `on_executed` sees each executed batch once its results are encoded (the worker's metrics)."""
    window = prepare(sources, engine, config, topics, window_id, policy)
    emitter = Emitter(config, topics, runtime_of(engine), engine.postprocessed)
    out = list(window.dead)
    n = 0
    for event in execute(engine, window, config):
        if isinstance(event, Poisoned):
            out.append(emitter.dead(event))
        else:
            out.extend(emitter.results(event, f"{window_id}.{n}", window.formed_us))
            on_executed(event)
            n += 1
    return out


def _batch_of(engine: Engine, config: ModelConfig, items: list[Item]) -> PaddedBatch:
    if config.tokenizer is None:
        return make_batch(config, [item.array for item in items])
    width = max(len(item.array) for item in items)
    if engine.pad_to_bucket:
        width = bucket_of(width, config.buckets)
    return make_batch(config, [item.array for item in items], width)


def _dead(
    error: Exception,
    src: ConsumedRecord,
    topics: Topics,
    config: ModelConfig,
    ids: dict[str, str],
    packed: tuple[int, bytes] | None = None,
) -> OutRecord:
    """A dead letter of `src`, or with `packed` (index, the record alone) of one record of its pack."""
    whose = Whose(ids.get("job_id"), ids.get("record_id"), config.name, config.version)
    return dead_letter(STAGE, error, src, topics, whose, packed)
