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

The emit thread (and the engine's replacement when it fails) lives in emit_thread.py, the prompts
both threads share in in_flight.py, the producer of results and dead letters in sender.py.

Windows stay small (the engine takes records as they come), and `has_room` bounds what is
submitted and not finished to a few more than the sequences the engine decodes at once (twice
that for the live lane, room()), so a sequence that ends is replaced at once, memory stays
bounded, and a live prompt waits behind few bulk ones in the engine's queue.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpu_consumer.cache_writes import runtime_of
from gpu_consumer.engines.generation_protocol import GenerationEngine, GenerationFailedError
from gpu_consumer.generation.emit_thread import EmitThread
from gpu_consumer.generation.in_flight import InFlight, Running, Window
from gpu_consumer.generation.requests import GenerationRequest, SamplingParams
from gpu_consumer.generation.sender import ResultSender
from gpu_consumer.lanes import EngineTime
from gpu_consumer.ledger import Ledger
from gpu_consumer.metrics import GpuMetrics
from gpu_consumer.steps import Inference, WorkerStats, commit_confirmed
from gpu_consumer.window_inference import Emitter, Poisoned, decode_sources
from kafka_io.clients import Consumer, Producer
from kafka_io.incarnation import BrokerIncarnation
from kafka_io.polling import Assignment, records_in, window_offsets
from kafka_io.records import ConsumedRecord
from kafka_io.topology import Lane
from model_repository.config import ModelConfig
from schemas import now_us
from schemas.errors import TensorFormatError
from schemas.generation_request import SAMPLING_ATTRIBUTE

log = logging.getLogger(__name__)


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


class PromptFlow:
    """What the window loop asks of the prompts in flight (the EngineFlow of gpu_consumer/steps.py)."""

    def __init__(self, flight: InFlight) -> None:
        self._flight = flight
        self.engine_time = EngineTime()  # every lane's prompts share the running batch: no lane waits for another's

    def has_room(self, lane: str) -> bool:
        """Bulk prompts are taken while the engine has at most an eighth of its sequences waiting
        beside those it decodes, so a live prompt (taken up to twice that) waits for few of them
        in the engine's first-come queue: it joins the running batch within a few steps."""
        flight = self._flight
        with flight.lock:
            return not flight.isolating and len(flight.running) < room(flight.engine.max_sequences, lane)

    def queued(self, lane: str) -> int:
        return 0  # prompts go to the engine as they are polled

    def engine_idle(self) -> bool:
        flight = self._flight
        with flight.lock:  # fewer sequences than the engine decodes at once: a prompt waiting would join now
            return len(flight.running) < flight.engine.max_sequences

    def window_waiting(self, lane: str) -> bool:
        return False


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
        self._metrics, self._skip_job = metrics, inference.skip_job
        self._flight = InFlight(engines.first)
        self.flow = PromptFlow(self._flight)
        self._emitter = Emitter(config, topics, runtime_of(engines.first))
        self._delivery_timeout_s = delivery_timeout_s
        self.ledger = Ledger()
        metrics.follow(self.ledger.in_flight)
        self._sender = ResultSender(new_producer, self.ledger, self._emitter.cache, metrics, delivery_timeout_s)
        self._keys = 0
        self._emit_thread = EmitThread(self._flight, self._sender, self.ledger, self._emitter, metrics, engines.renew)

    # --- main thread ---

    def submit(
        self, window: list[ConsumedRecord], sources: Sequence[ConsumedRecord], lane: Lane, contended: bool
    ) -> None:
        self.check()
        window_id = f"{self._worker_id}-{self.stats.windows}"
        entry = self.ledger.open(window_offsets(window), records_in(window), self._assignment.revocations)
        items, dead = decode_sources(sources, self._config, self._topics)
        held = Window(entry, now_us(), window_id, len(items), lane)
        requests: list[tuple[GenerationRequest, Running]] = []
        for item in items:
            try:
                params = sampling_of(item.attributes, self._config)
                needed = len(item.array) + params.max_tokens
                if needed > self._context:
                    raise TensorFormatError(
                        f"{len(item.array)} prompt tokens and max_tokens {params.max_tokens} exceed the model's "
                        f"context of {self._context} tokens"
                    )
                if needed > self._flight.engine.kv_tokens:  # it would wait for blocks forever: a stuck job
                    raise TensorFormatError(
                        f"{len(item.array)} prompt tokens and max_tokens {params.max_tokens} need {needed} tokens of "
                        f"KV cache; this worker's holds {self._flight.engine.kv_tokens} (--kv-cache-tokens)"
                    )
            except TensorFormatError as exc:
                dead.append(self._emitter.dead(Poisoned(item, exc)))
                held.waiting -= 1
                continue
            self._keys += 1
            key = f"{window_id}.{self._keys}"
            prompt = tuple(int(t) for t in item.array.tolist())
            request = GenerationRequest(key, prompt, params)
            requests.append((request, Running(held, item, request, now_us())))
        # Handed to the emit thread before any prompt reaches the engine, so its dead letters are
        # produced before the window can be sealed by its last completion.
        self._flight.to_emit.put((held, dead))
        # Under the lock: a prompt reaches the engine that failed (and is run alone by the emit
        # thread's isolation) or waits for the new one, never both (submitted twice, its key would
        # clash in the engine).
        flight = self._flight
        with flight.lock:
            for request, running in requests:
                flight.running[request.key] = running
            if flight.isolating:
                flight.deferred += [request for request, _ in requests]
            else:
                for request, _ in requests:
                    try:
                        flight.engine.submit(request)
                    except GenerationFailedError:
                        break  # the engine stopped: the emit thread's completions() says so, and isolates these
        self.stats.windows += 1
        self._commit()

    def tick(self) -> None:
        self.check()
        self._cancel_unwanted()
        self._commit()
        busy = self._flight.engine.busy_s  # a new engine (after a failure) counts from 0 again
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

    def finish(self) -> bool:
        self._finish(self._commit)
        return True

    def close(self) -> None:
        self._emit_thread.stop()
        self._sender.flush(5)
        if self._flight.replaced:  # the caller closes the engine it gave
            self._flight.engine.close()

    def check(self) -> None:
        """Raise what stopped the emit thread (the engine failed: the worker exits, nothing more is
        committed); produce again, with a new producer, what a failed delivery left unconfirmed."""
        if self._emit_thread.error is not None:
            raise self._emit_thread.error
        if self.ledger.failure is not None or self.ledger.stalled(self._delivery_timeout_s):
            self._sender.recover(
                self.ledger.failure or f"deliveries unconfirmed after {self._delivery_timeout_s:.0f} s"
            )

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
        flight = self._flight
        with flight.lock:
            unwanted = [
                key
                for key, running in flight.running.items()
                if self._skip_job(running.item.job_id, running.item.timestamps.get("submitted"))
            ]
        for key in unwanted:
            flight.engine.cancel(key)
            with flight.lock:
                running = flight.running.pop(key, None)
            if running is not None:
                flight.finished(running.window)

    def _commit(self, *, ask: bool = True) -> None:
        self.stats.records += commit_confirmed(self._consumer, self._incarnation, self.ledger, ask=ask)
