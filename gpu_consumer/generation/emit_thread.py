"""A GenerationStep's emit thread: it takes each completion from the engine (detokenized and cut at
its stop strings there), encodes its result and produces it, and produces what the main thread
hands over (a window's dead letters) before it seals the window.

An engine that fails (its thread or process stopped) is replaced by a new one, which runs the
prompts that were in flight one at a time: a prompt that fails the engine alone is a dead letter
with the engine's error, the others get their results, so no record makes the worker exit on
every redelivery (a crash loop). An engine that cannot be restarted is the host's fault: the
worker exits and Kafka gives its partitions to another. A fault that kills the worker's process
(a segfault in an engine's native code) is not caught here.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

import numpy as np

from gpu_consumer.engines.generation_protocol import GenerationEngine, GenerationFailedError
from gpu_consumer.generation.in_flight import InFlight, Running
from gpu_consumer.generation.requests import Completion
from gpu_consumer.generation.sender import ResultSender
from gpu_consumer.isolation import EngineFault
from gpu_consumer.ledger import Ledger
from gpu_consumer.metrics import GpuMetrics
from gpu_consumer.window_inference import Emitter, Poisoned
from kafka_io.produce import serve_deliveries
from kafka_io.records import OutRecord, job_record
from schemas import encode, now_us
from schemas.generation_request import INTERNAL_ATTRIBUTES
from schemas.records import InferenceResult, Tensor

log = logging.getLogger(__name__)

EMIT_WAIT_S = 0.02


class EmitThread:
    """The thread that produces completions; started at once, stopped by stop()."""

    def __init__(
        self,
        flight: InFlight,
        sender: ResultSender,
        ledger: Ledger,
        emitter: Emitter,
        metrics: GpuMetrics,
        new_engine: Callable[[], GenerationEngine] | None,
    ) -> None:
        self._flight, self._sender, self._ledger = flight, sender, ledger
        self._emitter, self._metrics, self._new_engine = emitter, metrics, new_engine
        self.error: BaseException | None = None  # what stopped the thread, for the main thread to raise
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._guarded_emit_loop, name="nearline-generation-emit", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._flight.to_emit.put(None)
        self._thread.join(timeout=10)

    def _guarded_emit_loop(self) -> None:
        try:
            self._emit_loop()
        except BaseException as exc:  # handed to the main thread, which exits the worker
            self.error = exc
            self._ledger.fail(f"generation emit thread: {exc}")

    def _emit_loop(self) -> None:
        flight = self._flight
        while not self._stopping.is_set():
            self._sender.serve()
            while True:  # what the main thread handed over: dead letters, windows to seal
                try:
                    handed = flight.to_emit.get_nowait()
                except queue.Empty:
                    break
                if handed is None:
                    return
                window, records = handed
                self._sender.produce(window.entry, records)
                if window.waiting == 0 and window.entry.sealed_at is None:
                    self._ledger.seal(window.entry)
            try:
                for completion in flight.engine.completions(EMIT_WAIT_S):
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
        with self._flight.lock:
            running = self._flight.running.pop(completion.key, None)
        if running is None:
            return None  # cancelled meanwhile
        result = self._result(completion, running)
        self._sender.produce(running.window.entry, [result], self._emitter.cache.one(running.item.reuse_key, result))
        self._flight.finished(running.window)
        return completion.key

    def _isolate(self, failure: BaseException) -> None:
        """The engine stopped, or failed sequences, with prompts in flight: a new engine runs each
        of them alone. One that fails the new engine alone is the record's fault (a dead letter
        with the error, and another new engine); the rest get their results. Prompts polled
        meanwhile wait, then run as usual."""
        flight = self._flight
        with flight.lock:
            flight.isolating = True
            suspects = len(flight.running)
        log.error(
            "the generation engine failed with %d prompts in flight (%s); a new engine runs each alone",
            suspects,
            failure,
        )
        self._replace_engine()
        tried: set[str] = set()
        while True:
            with flight.lock:
                held = {request.key for request in flight.deferred}
                untried = [r for key, r in flight.running.items() if key not in tried and key not in held]
            if not untried:
                break
            running = untried[0]
            tried.add(running.request.key)
            try:
                self._run_alone(running.request.key)
            except GenerationFailedError as exc:
                with flight.lock:
                    waiting = flight.running.pop(running.request.key, None) is not None
                if waiting:
                    log.error("record %s fails the generation engine alone: dead-lettered", running.item.record_id)
                    error = RuntimeError(f"the generation engine failed on this prompt alone: {exc}")
                    self._sender.produce(running.window.entry, [self._emitter.dead(Poisoned(running.item, error))])
                    flight.finished(running.window)
                self._replace_engine()
        with flight.lock:
            deferred = [request for request in flight.deferred if request.key in flight.running]  # not cancelled
            flight.deferred = []
            flight.isolating = False
            for request in deferred:
                flight.engine.submit(request)
        log.warning("isolation done: %d prompts ran alone; %d polled meanwhile now run", len(tried), len(deferred))

    def _run_alone(self, key: str) -> None:
        """Run one waiting prompt on the engine and emit its completion (and any other that comes);
        GenerationFailedError if the engine fails it."""
        flight = self._flight
        with flight.lock:
            running = flight.running.get(key)
        if running is None:
            return  # cancelled meanwhile
        flight.engine.submit(running.request)
        while True:
            serve_deliveries(self._sender.producer)
            for completion in flight.engine.completions(EMIT_WAIT_S):
                if completion.error is not None and not completion.refused:
                    if completion.key == key:
                        raise GenerationFailedError(completion.error)
                    continue  # another's: it stays waiting, and is run alone in its turn
                self._emit(completion)
            with flight.lock:
                if key not in flight.running:
                    return

    def _replace_engine(self) -> None:
        """A new engine in place of the failed one; one that cannot start is a fault of the host."""
        assert self._new_engine is not None
        try:
            self._flight.engine.close()
        except Exception as exc:  # it failed already: what is left of it goes with the process
            log.warning("closing the failed generation engine: %s", exc)
        try:
            engine = self._new_engine()
            engine.warmup()
        except Exception as exc:
            raise EngineFault(f"the generation engine failed and cannot be restarted: {exc}") from exc
        self._flight.engine, self._flight.replaced = engine, True

    def _result(self, completion: Completion, running: Running) -> OutRecord:
        item, config = running.item, self._emitter.config
        if completion.error is not None:
            return self._emitter.dead(Poisoned(item, RuntimeError(f"generation failed: {completion.error}")))
        submitted = item.timestamps.get("submitted")
        self._metrics.completed(len(completion.token_ids), completion.finish_reason, submitted, running.window.lane)
        attributes = {k: v for k, v in item.attributes.items() if k not in INTERNAL_ATTRIBUTES}
        with self._flight.lock:
            running_now = len(self._flight.running) + 1
        result = InferenceResult(
            job_id=item.job_id,
            record_id=item.record_id,
            seq=item.seq,
            model=config.name,
            model_version=config.version,
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
            self._emitter.topics.results, encode(result), item.job_id, item.record_id, item.timestamps.get("submitted")
        )
