"""The GPU loop's commit step for causal LMs: prompts join the running batch as they are polled,
and each result is produced as soon as its sequence finishes.

    main thread     poll a window, decode its records, submit each prompt to the engine
    engine thread   the engine's own (continuous batching: a new prompt joins at the next step)
    emit thread     completions: detokenize and cut at stop strings (the engine), encode, produce

The commit rule is the encoder steps' (gpu_consumer/ledger.py): a window's offsets move once
every record of it, and of every window polled before it, has a confirmed result or dead letter,
so a partition's offset never passes a record whose result is not stored. A 2,000-token story
holds back only the commit, never the results of the short answers beside it. A crash loses
nothing: what was in flight is consumed and generated again, and readers keep one result per
record.

An engine that fails (its thread or process stopped) is replaced by a new one, which runs the
prompts that were in flight one at a time: a prompt that fails the engine alone is a dead letter
with the engine's error, the others get their results, so no record makes the worker exit on
every redelivery (a crash loop). An engine that cannot be restarted is the host's fault: the
worker exits and Kafka gives its partitions to another. A fault that kills the worker's process
(a segfault in an engine's native code) is not caught here.

Windows stay small (the engine takes records as they come), and `has_room` bounds what is
submitted and not finished to a few more than the sequences the engine decodes at once (twice
that for the live lane, room()), so a sequence that ends is replaced at once, memory stays
bounded, and a live prompt waits behind few bulk ones in the engine's queue.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpu_consumer.generation.engine import GenerationEngine, GenerationFailedError
from gpu_consumer.generation.requests import Completion, GenerationRequest, SamplingParams
from gpu_consumer.handler import Emitter, Item, Poisoned, decode_sources
from gpu_consumer.isolation import EngineFault
from gpu_consumer.lanes import EngineTime
from gpu_consumer.ledger import Entry, Ledger
from gpu_consumer.metrics import GpuMetrics
from gpu_consumer.steps import Inference, WorkerStats, commit_confirmed
from kafka_io.clients import Consumer, Producer
from kafka_io.errors import DeliveryError
from kafka_io.incarnation import BrokerIncarnation
from kafka_io.polling import Assignment, records_in, window_offsets
from kafka_io.produce import discard, flush, produce_all, send, serve_deliveries
from kafka_io.records import ConsumedRecord, OutRecord, job_record
from kafka_io.topology import Priority
from schemas import encode, now_us
from schemas.errors import TensorFormatError
from schemas.generation_request import INTERNAL_ATTRIBUTES, SAMPLING_ATTRIBUTE
from schemas.model_config import ModelConfig
from schemas.records import InferenceResult, Tensor

log = logging.getLogger(__name__)

RETRY_PAUSE_S = 2.0
EMIT_WAIT_S = 0.02


@dataclass(eq=False)
class _Window:
    entry: Entry
    formed_us: int
    window_id: str
    waiting: int  # records submitted and not finished
    lane: Priority


@dataclass(eq=False)
class _Running:
    window: _Window
    item: Item
    request: GenerationRequest  # kept to run it again on a new engine (_isolate)
    started_us: int


def room(max_sequences: int, lane: str) -> int:
    """How many prompts of `lane` may be submitted and not finished: the sequences decoded at once
    and a few waiting (bulk), or twice that (live)."""
    waiting = max(2, max_sequences // 8)
    return 2 * (max_sequences + waiting) if lane == "live" else max_sequences + waiting


def sampling_of(attributes: Mapping[str, str], config: ModelConfig) -> SamplingParams:
    """A record's sampling parameters (its SAMPLING_ATTRIBUTE), checked against the model:
    TensorFormatError (the record is dead-lettered) when they cannot be decoded or do not fit."""
    assert config.generation is not None
    raw = attributes.get(SAMPLING_ATTRIBUTE)
    try:
        given = json.loads(raw) if raw is not None else {}
        if not isinstance(given, dict):
            raise ValueError("not an object")
        params = SamplingParams(
            max_tokens=int(given.get("max_tokens", config.generation.default_max_tokens)),
            temperature=float(given.get("temperature", 0.0)),
            top_p=float(given.get("top_p", 1.0)),
            top_k=int(given.get("top_k", 0)),
            seed=None if given.get("seed") is None else int(given["seed"]),
            stop=tuple(str(s) for s in given.get("stop", ())),
        )
    except (ValueError, TypeError) as exc:
        raise TensorFormatError(f"{SAMPLING_ATTRIBUTE}: cannot be read as sampling parameters: {exc}") from None
    if params.max_tokens < 1:
        raise TensorFormatError(f"max_tokens must be at least 1, got {params.max_tokens}")
    if not 0 <= params.temperature <= 2 or not 0 < params.top_p <= 1 or params.top_k < 0:
        raise TensorFormatError(f"{SAMPLING_ATTRIBUTE}: sampling parameters out of range: {raw}")
    return params


@dataclass(frozen=True)
class Engines:
    """The engine a GenerationStep starts with, warm, and what makes another when it fails (None:
    an engine failure stops the worker)."""

    first: GenerationEngine
    renew: Callable[[], GenerationEngine] | None = None


class GenerationStep:
    """At-least-once for causal LMs (the CommitStep protocol of gpu_consumer/steps.py)."""

    def __init__(
        self,
        consumer: Consumer,
        assignment: Assignment,
        incarnation: BrokerIncarnation,
        inference: Inference,
        engines: Engines,
        new_producer: Callable[[], Producer],
        metrics: GpuMetrics,
        delivery_timeout_s: float = 30.0,
    ) -> None:
        config, topics = inference.config, inference.topics
        if config.generation is None:
            raise ValueError(f"model {config.name} does not generate text")
        self.stats = WorkerStats()
        self._busy_seen = 0.0  # the engine's busy seconds already reported
        self._consumer, self._assignment, self._incarnation = consumer, assignment, incarnation
        self._config, self._topics, self._worker_id = config, topics, inference.worker_id
        self._context = config.generation.context_length
        self._engine, self._metrics, self._skip_job = engines.first, metrics, inference.skip_job
        self._new_engine = engines.renew
        self._replaced = False  # the engine in use was made here (close() closes it)
        self._isolating = False  # a new engine runs the failed one's prompts one at a time
        self._deferred: list[GenerationRequest] = []  # prompts polled meanwhile, submitted after
        self._emitter = Emitter(config, topics)
        self._new_producer = new_producer
        self._producer = new_producer()
        self._producer_generation = 0
        self._delivery_timeout_s = delivery_timeout_s
        self.ledger = Ledger()
        metrics.follow(self.ledger.in_flight)
        self._lock = threading.Lock()
        self._producing = threading.Lock()  # the emit thread's produce, and a recovery, one at a time
        self._running: dict[str, _Running] = {}  # by engine key
        self._keys = 0
        self._to_emit: queue.Queue[tuple[_Window, list[OutRecord]] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._guarded_emit_loop, name="nearline-generation-emit", daemon=True)
        self._thread.start()

    @property
    def engine_time(self) -> EngineTime:
        return EngineTime()  # every lane's prompts share the running batch: no lane waits for another's

    # --- main thread ---

    def submit(
        self, window: list[ConsumedRecord], sources: Sequence[ConsumedRecord], lane: Priority, contended: bool
    ) -> None:
        self.check()
        window_id = f"{self._worker_id}-{self.stats.windows}"
        entry = self.ledger.open(window_offsets(window), records_in(window), self._assignment.revocations)
        items, dead = decode_sources(sources, self._config, self._topics)
        held = _Window(entry, now_us(), window_id, len(items), lane)
        requests: list[tuple[GenerationRequest, _Running]] = []
        for item in items:
            try:
                params = sampling_of(item.attributes, self._config)
                needed = len(item.array) + params.max_tokens
                if needed > self._context:
                    raise TensorFormatError(
                        f"{len(item.array)} prompt tokens and max_tokens {params.max_tokens} exceed the model's "
                        f"context of {self._context} tokens"
                    )
                if needed > self._engine.kv_tokens:  # it would wait for blocks forever: a stuck job
                    raise TensorFormatError(
                        f"{len(item.array)} prompt tokens and max_tokens {params.max_tokens} need {needed} tokens of "
                        f"KV cache; this worker's holds {self._engine.kv_tokens} (--kv-cache-tokens)"
                    )
            except TensorFormatError as exc:
                dead.append(self._emitter.dead(Poisoned(item, exc)))
                held.waiting -= 1
                continue
            self._keys += 1
            key = f"{window_id}.{self._keys}"
            prompt = tuple(int(t) for t in item.array.tolist())
            request = GenerationRequest(key, prompt, params)
            requests.append((request, _Running(held, item, request, now_us())))
        # Handed to the emit thread before any prompt reaches the engine, so its dead letters are
        # produced before the window can be sealed by its last completion.
        self._to_emit.put((held, dead))
        # Under the lock: a prompt reaches the engine that failed (and is run alone by _isolate) or
        # waits for the new one, never both (submitted twice, its key would clash in the engine).
        with self._lock:
            for request, running in requests:
                self._running[request.key] = running
            if self._isolating:
                self._deferred += [request for request, _ in requests]
            else:
                for request, _ in requests:
                    try:
                        self._engine.submit(request)
                    except GenerationFailedError:
                        break  # the engine stopped: the emit thread's completions() says so, _isolate runs these
        self.stats.windows += 1
        self._commit()

    def tick(self) -> None:
        self.check()
        self._cancel_unwanted()
        self._commit()
        busy = self._engine.busy_s  # a new engine (after a failure) counts from 0 again
        self._metrics.engine_busy(busy - self._busy_seen if busy >= self._busy_seen else busy)
        self._busy_seen = busy

    def idle(self) -> None:
        pass

    def before_revoke(self) -> None:
        if self._incarnation.doubting:
            log.warning("a revoke while the broker is in doubt; the prompts in flight will be generated again")
            return
        if not self._finish(lambda: self._commit(ask=False)):
            log.warning("prompts still unfinished at revoke; they will be consumed and generated again")

    def has_room(self, lane: str) -> bool:
        """Bulk prompts are taken while the engine has at most an eighth of its sequences waiting
        beside those it decodes, so a live prompt (taken up to twice that) waits for few of them
        in the engine's first-come queue: it joins the running batch within a few steps."""
        with self._lock:
            return not self._isolating and len(self._running) < room(self._engine.max_sequences, lane)

    def queued(self, lane: str) -> int:
        return 0  # prompts go to the engine as they are polled

    def engine_idle(self) -> bool:
        with self._lock:  # fewer sequences than the engine decodes at once: a prompt waiting would join now
            return len(self._running) < self._engine.max_sequences

    def window_waiting(self, lane: str) -> bool:
        return False

    def finish(self) -> bool:
        self._finish(self._commit)
        return True

    def close(self) -> None:
        self._stopping.set()
        self._to_emit.put(None)
        self._thread.join(timeout=10)
        flush(self._producer, 5)
        if self._replaced:  # the caller closes the engine it gave
            self._engine.close()

    def check(self) -> None:
        """Raise what stopped the emit thread (the engine failed: the worker exits, nothing more is
        committed); produce again, with a new producer, what a failed delivery left unconfirmed."""
        if self._error is not None:
            raise self._error
        if self.ledger.failure is not None or self.ledger.stalled(self._delivery_timeout_s):
            self._recover(self.ledger.failure or f"deliveries unconfirmed after {self._delivery_timeout_s:.0f} s")

    def _finish(self, commit: Callable[[], None], timeout_s: float = 120.0) -> bool:
        """Run what is in flight to its results and commit it (the end of a drain, a revoke): at most
        timeout_s, as the encoders' pipeline waits; what is unfinished then is consumed again by
        the partitions' next owner."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check()
            self._cancel_unwanted()
            commit()
            if not self.ledger.in_flight() or time.monotonic() >= deadline:
                return not self.ledger.in_flight()
            self.ledger.wait(0.05)

    def _cancel_unwanted(self) -> None:
        """Sequences of jobs cancelled or past their deadline stop at the engine's next step; their
        records count as done without a result, as records skipped at the poll do."""
        with self._lock:
            unwanted = [
                key
                for key, running in self._running.items()
                if self._skip_job(running.item.job_id, running.item.timestamps.get("submitted"))
            ]
        for key in unwanted:
            self._engine.cancel(key)
            with self._lock:
                running = self._running.pop(key, None)
            if running is not None:
                self._finished(running.window)

    def _finished(self, window: _Window) -> None:
        with self._lock:
            window.waiting -= 1
            done = window.waiting == 0
        if done:
            self._to_emit.put((window, []))  # seals it once what was handed before is produced

    def _commit(self, *, ask: bool = True) -> None:
        self.stats.records += commit_confirmed(self._consumer, self._incarnation, self.ledger, ask=ask)

    def _recover(self, reason: str) -> None:
        """A new producer sends every unconfirmed result again, until the broker stores them (an
        outage is waited out, nothing committed meanwhile). The emit thread produces nothing while
        this runs, so the results counted as confirmed are exactly those sent again; windows whose
        sequences still decode stay open (pipeline.py's recovery seals its windows instead: there
        every window in flight has all its outputs once the engine queue is drained)."""
        log.warning("%s; recreating the producer and producing the unconfirmed results again", reason)
        with self._producing:
            entries = self.ledger.unconfirmed()
            records = [r for e in entries for r in e.outputs]
            while True:
                self._producer_generation += 1
                discard(self._producer)
                self._producer = self._new_producer()
                try:
                    produce_all(self._producer, records, self._delivery_timeout_s)
                    break
                except DeliveryError as exc:
                    log.warning("waiting for the broker to store %d results: %s", len(records), exc)
                time.sleep(RETRY_PAUSE_S)
            self.ledger.resolve(entries, seal=False)

    # --- emit thread ---

    def _guarded_emit_loop(self) -> None:
        try:
            self._emit_loop()
        except BaseException as exc:  # handed to the main thread, which exits the worker
            self._error = exc
            self.ledger.fail(f"generation emit thread: {exc}")

    def _emit_loop(self) -> None:
        while not self._stopping.is_set():
            generation, producer = self._producer_generation, self._producer
            try:
                serve_deliveries(producer)
            except DeliveryError as exc:
                if generation == self._producer_generation:
                    self.ledger.fail(str(exc))
            while True:  # what the main thread handed over: dead letters, windows to seal
                try:
                    handed = self._to_emit.get_nowait()
                except queue.Empty:
                    break
                if handed is None:
                    return
                window, records = handed
                self._produce(window.entry, records)
                if window.waiting == 0 and window.entry.sealed_at is None:
                    self.ledger.seal(window.entry)
            try:
                for completion in self._engine.completions(EMIT_WAIT_S):
                    self._emit(completion)
            except GenerationFailedError as exc:
                if self._new_engine is None:
                    raise
                self._isolate(exc)

    def _emit(self, completion: Completion) -> str | None:
        """Produce a completion's result; its key, or None if its record is no longer waiting.
        An error the engine may have failed a whole batch with raises GenerationFailedError: the
        record is run again alone (_isolate) before anyone calls it poison."""
        if completion.error is not None and not completion.refused:
            raise GenerationFailedError(completion.error)
        with self._lock:
            running = self._running.pop(completion.key, None)
        if running is None:
            return None  # cancelled meanwhile
        result = self._result(completion, running)
        self._produce(running.window.entry, [result], self._emitter.cache.one(running.item.reuse_key, result))
        self._finished(running.window)
        return completion.key

    def _isolate(self, failure: BaseException) -> None:
        """The engine stopped, or failed sequences, with prompts in flight: a new engine runs each
        of them alone. One that fails the new engine alone is the record's fault (a dead letter
        with the error, and another new engine); the rest get their results. Prompts polled
        meanwhile wait, then run as usual."""
        with self._lock:
            self._isolating = True
            suspects = len(self._running)
        log.error(
            "the generation engine failed with %d prompts in flight (%s); a new engine runs each alone",
            suspects,
            failure,
        )
        self._replace_engine()
        tried: set[str] = set()
        while True:
            with self._lock:
                held = {request.key for request in self._deferred}
                untried = [r for key, r in self._running.items() if key not in tried and key not in held]
            if not untried:
                break
            running = untried[0]
            tried.add(running.request.key)
            try:
                self._run_alone(running.request.key)
            except GenerationFailedError as exc:
                with self._lock:
                    waiting = self._running.pop(running.request.key, None) is not None
                if waiting:
                    log.error("record %s fails the generation engine alone: dead-lettered", running.item.record_id)
                    error = RuntimeError(f"the generation engine failed on this prompt alone: {exc}")
                    self._produce(running.window.entry, [self._emitter.dead(Poisoned(running.item, error))])
                    self._finished(running.window)
                self._replace_engine()
        with self._lock:
            deferred = [request for request in self._deferred if request.key in self._running]  # not cancelled
            self._deferred = []
            self._isolating = False
            for request in deferred:
                self._engine.submit(request)
        log.warning("isolation done: %d prompts ran alone; %d polled meanwhile now run", len(tried), len(deferred))

    def _run_alone(self, key: str) -> None:
        """Run one waiting prompt on the engine and emit its completion (and any other that comes);
        GenerationFailedError if the engine fails it."""
        with self._lock:
            running = self._running.get(key)
        if running is None:
            return  # cancelled meanwhile
        self._engine.submit(running.request)
        while True:
            serve_deliveries(self._producer)
            for completion in self._engine.completions(EMIT_WAIT_S):
                if completion.error is not None and not completion.refused:
                    if completion.key == key:
                        raise GenerationFailedError(completion.error)
                    continue  # another's: it stays waiting, and is run alone in its turn
                self._emit(completion)
            with self._lock:
                if key not in self._running:
                    return

    def _replace_engine(self) -> None:
        """A new engine in place of the failed one; one that cannot start is a fault of the host."""
        assert self._new_engine is not None
        try:
            self._engine.close()
        except Exception as exc:  # it failed already: what is left of it goes with the process
            log.warning("closing the failed generation engine: %s", exc)
        try:
            engine = self._new_engine()
            engine.warmup()
        except Exception as exc:
            raise EngineFault(f"the generation engine failed and cannot be restarted: {exc}") from exc
        self._engine, self._replaced = engine, True

    def _result(self, completion: Completion, running: _Running) -> OutRecord:
        item = running.item
        if completion.error is not None:
            return self._emitter.dead(Poisoned(item, RuntimeError(f"generation failed: {completion.error}")))
        submitted = item.timestamps.get("submitted")
        self._metrics.completed(len(completion.token_ids), completion.finish_reason, submitted, running.window.lane)
        attributes = {k: v for k, v in item.attributes.items() if k not in INTERNAL_ATTRIBUTES}
        with self._lock:
            running_now = len(self._running) + 1
        result = InferenceResult(
            job_id=item.job_id,
            record_id=item.record_id,
            seq=item.seq,
            model=self._config.name,
            model_version=self._config.version,
            outputs=(Tensor.from_array("completion_ids", np.asarray(completion.token_ids, dtype=np.int32)),),
            batch_id=running.window.window_id,
            batch_size=running_now,
            attributes=attributes,
            timestamps={
                **item.timestamps,
                "batch_formed": running.window.formed_us,
                "inference_start": running.started_us,
                "inference_end": now_us(),
                "result_produced": now_us(),
            },
            length=completion.prompt_tokens,
            padded_length=completion.prompt_tokens,
            text=completion.text,
            finish_reason=completion.finish_reason,
            completion_tokens=len(completion.token_ids),
            cached_prompt_tokens=completion.cached_prompt_tokens,
        )
        return job_record(
            self._topics.results, encode(result), item.job_id, item.record_id, item.timestamps.get("submitted")
        )

    def _produce(self, entry: Entry, records: list[OutRecord], cached: OutRecord | None = None) -> None:
        """Produce `records` of a window, and `cached`, a result's record for the results cache
        (best effort: no part of the window's commit, gpu_consumer/cache_writes.py)."""
        if not records:
            return
        with self._producing:
            self._send(entry, records)
            if cached is not None:
                self._emitter.cache.send(self._producer, [cached])
                self._metrics.produced([cached])

    def _send(self, entry: Entry, records: list[OutRecord]) -> None:
        self.ledger.sent(entry, records)
        generation, ledger = self._producer_generation, self.ledger

        def on_stored() -> None:
            if generation == self._producer_generation:
                ledger.confirm(entry)

        def on_failed(reason: str) -> None:
            if generation == self._producer_generation:
                ledger.fail(reason)

        try:
            send(self._producer, records, on_stored, on_failed)
        except DeliveryError as exc:
            ledger.fail(str(exc))
        self._metrics.produced(records)
