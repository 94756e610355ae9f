"""Results reused before any CPU work (docs/reuse.md): a record's reuse key is looked up in its
model's results cache before it is tokenized, rendered or decoded. A hit is written here as the
new record's result: the cached result's outputs (the same bytes the GPU worker wrote for the same
model version and content) under the new record's job, id, seq and attributes, with a `reused`
stamp and header. A miss goes on to be tokenized, its key in its tensors record's
REUSE_KEYS_HEADER, and the GPU worker caches its result under it joined to its engine (reuse/keys.py
CacheKeys); the lookup asks under the engine that serves the model now (EngineResults). A
generation request sampled without a seed has no key: never looked up, never cached.

Why here and not at submit: this is the earliest stage that has both the record's content and the
model version's files (the fingerprint needs them), it sees every record whoever produced it
(`submit`, `produce`, a foreign producer), and a hit skips tokenizing as well as inference.

A cached value that does not decode, or names another model version, is computed instead, with a
warning: the cache can cost a recompute, never a wrong result.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from kafka_io.errors import KAFKA_FAULTS
from kafka_io.records import REUSED_HEADER, OutRecord, job_record
from kafka_io.result_cache import CacheTail, cache_topic
from kafka_io.settings import KafkaSettings
from kafka_io.topics import try_ensure_topics
from kafka_io.topology import Topics
from model_repository.config import ModelConfig
from preprocess_app.cache_share import host_results, shared_name
from reuse.fingerprint import model_fingerprint
from reuse.keys import CacheKeys, RecordKeys
from reuse.store import ResultStore
from schemas import InferenceResult, SerdeError, decode, encode, now_us
from schemas.attributes import REUSED_STAMP
from schemas.generation_request import (
    INTERNAL_ATTRIBUTES,
    REQUEST_ATTRIBUTE,
    RequestError,
    parse_request,
    prompt_request,
)

log = logging.getLogger(__name__)


class CachedResults(Protocol):
    """A model's results cache as the lookup reads it (reuse/store.py's ResultStore)."""

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]: ...


@dataclass(frozen=True)
class CachedModel:
    """One model version's reuse keys and its results cache."""

    config: ModelConfig
    keys: RecordKeys
    results: CachedResults


class ReuseLookup:
    """Each model version's keys and cache, opened on first use by `open_cache(config)` (the
    worker's: a store fed from cache.<model>, waited on until it has read what the topic held); a
    model whose cache cannot be opened (None) is computed, and asked again on a later batch."""

    def __init__(self, open_cache: Callable[[ModelConfig], CachedResults | None]) -> None:
        self._open = open_cache
        self._models: dict[tuple[str, str], CachedModel] = {}
        self._lock = threading.Lock()  # a worker's steps may ask from more than one thread

    def __call__(self, config: ModelConfig) -> CachedModel | None:
        name = (config.name, config.version)
        with self._lock:
            cached = self._models.get(name)
            if cached is None:
                try:
                    results = self._open(config)
                except OSError as exc:  # no room or no right to spool the cache: computed, asked again later
                    log.warning("%s: the results cache cannot be opened, computing its records: %s", config.name, exc)
                    return None
                if results is None:
                    return None
                cached = CachedModel(config, RecordKeys(model_fingerprint(config)), results)
                self._models[name] = cached
            return cached


def found(cached: CachedModel, keys: Sequence[bytes | None]) -> list[bytes | None]:
    """The cached values of `keys`, None where there is none (or no key); a store that cannot be
    read (its spool gone or unreadable) finds nothing, with a warning: the records are computed."""
    asked = [key for key in keys if key is not None]
    try:
        values = cached.results.get_many(asked)
    except (OSError, ValueError) as exc:
        log.warning("%s: the results cache cannot be read, computing: %s", cached.config.name, exc)
        return [None] * len(keys)
    if len(asked) == len(keys):
        return values
    answers = iter(values)
    return [None if key is None else next(answers) for key in keys]


def text_key(keys: RecordKeys) -> Callable[[str, Mapping[str, str] | None], bytes | None]:
    """A text record's reuse key, by its text alone."""
    return lambda text, attributes: keys.text(text)


def request_key(keys: RecordKeys, text: str, attributes: Mapping[str, str] | None) -> bytes | None:
    """A generation request's reuse key (reuse/keys.py), None for a request that is never reused
    (sampled without a seed) or that cannot be read (it is dead-lettered when it is rendered)."""
    try:
        request = parse_request(text) if attributes and REQUEST_ATTRIBUTE in attributes else prompt_request(text)
    except RequestError:
        return None
    return keys.generation(request)


@dataclass(frozen=True)
class ReusedRecord:
    """Who a reused result is for: the new record's job, id, seq, attributes and stamps."""

    job_id: str
    record_id: str
    seq: int
    attributes: Mapping[str, str]
    timestamps: Mapping[str, int]


def reused_result(cached: bytes, config: ModelConfig, record: ReusedRecord, topics: Topics) -> OutRecord | None:
    """The new record's result from a cached one, or None (with a warning) where the cached value
    cannot be served: then the record is computed."""
    try:
        result = decode(cached, InferenceResult)
    except SerdeError as exc:
        log.warning(
            "%s: a cached result does not decode, computing the record instead: %s", topics.cache(config.name), exc
        )
        return None
    # a completion has a finish reason, an encoder's output none: one that has the other's is not this model's
    generated = bool(result.finish_reason)
    if (result.model, result.model_version) != (config.name, config.version) or generated != config.is_generator:
        log.warning(
            "%s: a cached result is of %s:%s, not %s:%s; computing the record instead",
            topics.cache(config.name),
            result.model,
            result.model_version,
            config.name,
            config.version,
        )
        return None
    fresh = replace(
        result,
        job_id=record.job_id,
        record_id=record.record_id,
        seq=record.seq,
        attributes={k: v for k, v in record.attributes.items() if k not in INTERNAL_ATTRIBUTES},
        timestamps={**record.timestamps, REUSED_STAMP: now_us()},
    )
    submitted = record.timestamps.get("submitted")
    out = job_record(topics.results, encode(fresh), record.job_id, record.record_id, submitted)
    out.headers = [*out.headers, (REUSED_HEADER, b"1")]  # job_record's list is shared
    return out


class Serving(Protocol):
    """Which engine serves a model now (kafka_io/result_cache.py CacheTail: the runtime its topic names)."""

    @property
    def runtime(self) -> str | None: ...


class EngineResults:
    """A model's results cache as looked up: a record's reuse key is asked under the cache key of
    the engine that serves the model now (reuse/keys.py CacheKeys), so a result another engine or
    precision computed is not found; while no engine has said it serves the model, nothing is."""

    def __init__(self, store: CachedResults, serving: Serving) -> None:
        self._store, self._serving = store, serving
        self._keys: CacheKeys | None = None

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        runtime = self._serving.runtime
        if runtime is None:
            return [None] * len(keys)
        cache_key = self._keys
        if cache_key is None or cache_key.runtime != runtime:
            cache_key = self._keys = CacheKeys(runtime)
        return self._store.get_many([cache_key(key) for key in keys])


# How long the first batch of a model waits for its cache to be read to the end the topic had
# (a store rebuilt from cache.<model> at start): past it, the batch goes on with what was read, and
# what was not is computed.
LOAD_WAIT_S = 60.0


class CacheTails:
    """open_cache for ReuseLookup in a worker: each model's results, one per model name whatever
    its versions (a key names its version), read by one worker of the host for all of them
    (preprocess_app/cache_share.py). The worker that reads it keeps a ResultStore (its spool in
    `spool_dir`) fed by a CacheTail of cache.<model>, looked up under its engine (EngineResults),
    waited on once until loaded. Both live as long as the worker: the tails are daemon threads,
    and the spools go with the worker's scratch folder."""

    def __init__(self, settings: KafkaSettings, topics: Topics, spool_dir: Path) -> None:
        self._settings, self._topics, self._spool_dir = settings, topics, spool_dir
        self._stores: dict[str, CachedResults] = {}

    def __call__(self, config: ModelConfig) -> CachedResults:
        results = self._stores.get(config.name)
        if results is None:
            self._made(config.name)
            name = shared_name(self._settings.bootstrap_servers, self._topics.namespace, config.name)
            read = functools.partial(self.read, config.name)
            results = self._stores[config.name] = host_results(name, self._topics.cache(config.name), read)
        return results

    def read(self, model: str) -> EngineResults:
        """A reader of the model's cache of this worker's own, once it has read what the topic held
        (or LOAD_WAIT_S has passed)."""
        self._spool_dir.mkdir(parents=True, exist_ok=True)
        store = ResultStore(self._spool_dir)
        tail = CacheTail(self._settings, self._topics, model, store).start()
        if not tail.loaded(LOAD_WAIT_S):
            log.warning(
                "%s: not read to its end within %.0f s; records it holds past that are computed",
                tail.topic,
                LOAD_WAIT_S,
            )
        return EngineResults(store, tail)

    def _made(self, model: str) -> None:
        """cache.<model> created where missing, so that the tail follows it from a GPU worker's
        first write (a tail that finds no topic looks again only every few seconds, and a job
        submitted meanwhile would miss results cached before it). A refusal or a fault is said
        and left to the GPU worker, which makes the topic too: the cache is best effort."""
        topic = cache_topic(self._topics, model)
        try:
            refused = try_ensure_topics(self._settings, [topic])
        except KAFKA_FAULTS as exc:
            refused = {topic.name: str(exc)}
        for name, why in refused.items():
            log.warning("%s cannot be created here (%s); it is read once a GPU worker has made it", name, why)
