"""The GPU worker's writes to its model's results cache, cache.<model> (docs/reuse.md).

A successful result of a record that has a reuse key (the preprocess worker looked it up and
missed; the key came in its tensors record's REUSE_KEYS_HEADER) is produced to the cache too: key
the cache key of that reuse key and this worker's engine (reuse/keys.py CacheKeys), value the very
bytes produced to results. Dead letters never are. As it starts, the worker writes its engine's
runtime under RUNTIME_RECORD_KEY: the preprocess workers look results up under that engine's keys,
so a result is served only where the engine that serves the model now computed it. The
writes are best effort: a cache record lost costs a recompute later, never a wrong or lost result,
so its delivery is no part of the commit rule, and a failure to store one is logged once per
cause, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

from kafka_io.clients import Producer, make_producer
from kafka_io.errors import KAFKA_FAULTS
from kafka_io.produce import send
from kafka_io.records import RUNTIME_RECORD_KEY, OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from reuse.keys import CacheKeys

log = logging.getLogger(__name__)

_CAUSES_KEPT = 64  # distinct failures remembered, so each is logged once
ANNOUNCE_TIMEOUT_S = 10.0


class Keyed(Protocol):
    """A decoded record as the cache needs it (gpu_consumer.window_inference.Item)."""

    @property
    def reuse_key(self) -> bytes | None: ...


class CacheWrites:
    """What one worker writes to cache.<model>, and the failures it has logged."""

    def __init__(self, topics: Topics, model: str, runtime: str) -> None:
        """runtime: the engine that computes the results (runtime_of)."""
        self.topic, self._results = topics.cache(model), topics.results
        self._keys = CacheKeys(runtime)
        self._told: set[str] = set()

    def of(self, items: Sequence[Keyed], produced: Sequence[OutRecord]) -> list[OutRecord]:
        """The cache records of `items` and what was produced for each (in order): one per result
        whose record has a reuse key; none for a dead letter (a result too large to store)."""
        if len(items) != len(produced):
            raise ValueError(f"{len(items)} records and {len(produced)} outputs")
        results, cache_key = self._results, self._keys
        return [
            OutRecord(self.topic, out.value, cache_key(item.reuse_key))
            for item, out in zip(items, produced, strict=True)
            if item.reuse_key is not None and out.topic == results and out.value is not None
        ]

    def one(self, key: bytes | None, produced: OutRecord) -> OutRecord | None:
        """The cache record of one record's `produced` output; None unless it is a result and the
        record has a reuse key."""
        if key is None or produced.topic != self._results or produced.value is None:
            return None
        return OutRecord(self.topic, produced.value, self._keys(key))

    def send(self, producer: Producer, records: Iterable[OutRecord]) -> None:
        """Hand `records` to the producer; whatever becomes of them is logged, never raised."""
        try:
            send(producer, records, _stored, self.failed)
        except KAFKA_FAULTS as exc:  # a producer that turned fatal: the results' own send says so too
            self.failed(f"producing to {self.topic} failed: {exc}")

    def failed(self, reason: str) -> None:
        """A cache record not stored: logged the first time its cause is seen."""
        if reason in self._told:
            return
        if len(self._told) >= _CAUSES_KEPT:
            self._told.clear()
        self._told.add(reason)
        log.warning("results cache: %s; those results are computed again when next asked for", reason)


def _stored() -> None:
    pass


def runtime_of(engine: object) -> str:
    """What of an engine decides its results' bytes beside the model (the cache keys' runtime): its
    name, where it runs (ONNX Runtime's first execution provider, or the device's type) and its
    precision, e.g. "torch/cuda/fp16", "onnxruntime/CPUExecutionProvider"."""
    parts = [str(getattr(engine, "name", type(engine).__name__))]
    providers = getattr(engine, "providers", None)
    if providers:
        parts.append(str(providers[0]))
    device = getattr(engine, "device", None)
    if device is not None:
        parts.append(str(getattr(device, "type", device)))
    precision = getattr(engine, "precision", None)
    if precision:
        parts.append(str(precision))
    return "/".join(parts)


def announce_runtime(settings: KafkaSettings, topics: Topics, model: str, runtime: str) -> None:
    """Say in cache.<model> that `runtime` serves the model (RUNTIME_RECORD_KEY), as a worker
    starts, before its first result: the preprocess workers then look results up under its
    engine's keys. Best effort, as every cache write: a record not stored is said, never raised
    (the preprocess workers go on with the engine they were told of before, or find nothing)."""
    writes = CacheWrites(topics, model, runtime)
    what = f"the engine serving {model} ({runtime}) not stored in {writes.topic}"
    producer = make_producer(settings)
    try:
        writes.send(producer, [OutRecord(writes.topic, runtime.encode(), RUNTIME_RECORD_KEY)])
        if producer.flush(ANNOUNCE_TIMEOUT_S):
            writes.failed(f"{what} within {ANNOUNCE_TIMEOUT_S:.0f} s")
    except KAFKA_FAULTS as exc:
        writes.failed(f"{what}: {exc}")
