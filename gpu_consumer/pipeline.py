"""The pipelined GPU worker: the engine never waits on polling, decoding, encoding or the broker.

    main thread    poll window n+2, prepare it (decode, sort, pad)    --windows-->
    engine thread  execute window n+1, batch by batch                 --executed batches-->
    emit thread    encode window n's results, produce them (and the results cache's records,
                   cache_writes.py); delivery reports confirm the results

and back on the main thread, offsets are committed over the confirmed prefix of windows
(gpu_consumer/ledger.py), so the commit rule is today's: a record's offset moves only once its
outputs, and those of every record polled before it, are stored. At most `max_in_flight` windows
(one more for a live one) are between poll and commit, which bounds memory. The engine thread only runs the engine: the
Python work of the other two overlaps its compute, as a GPU kernel would.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from gpu_consumer.cache_writes import runtime_of
from gpu_consumer.engines.protocol import Engine
from gpu_consumer.lanes import EngineTime
from gpu_consumer.ledger import Entry, Ledger
from gpu_consumer.metrics import GpuMetrics
from gpu_consumer.window_inference import Emitter, Executed, Poisoned, Window, execute
from kafka_io.clients import Producer
from kafka_io.errors import KAFKA_FAULTS, DeliveryError
from kafka_io.produce import awaiting_delivery, discard, flush, produce_all, send, serve_deliveries
from kafka_io.records import TP, OutRecord
from kafka_io.topology import Lane, Topics
from model_repository.config import ModelConfig

log = logging.getLogger(__name__)

Marker = Literal["start", "end"]

# The engine queue's order: live windows and the bulk windows the share guard picked (contended),
# first in first out; then the other bulk windows; then the sentinel that stops the thread.
_FIRST, _BEHIND, _LAST = 0, 1, 2

# The emit thread's wait for work when no delivery report is due (it also wakes for work at once).
IDLE_EMIT_WAIT_S = 0.1
# Waiting out a broker outage: the pause between attempts to produce the unconfirmed windows
# again (each attempt itself waits delivery_timeout_s for the broker), and how often it is logged.
RETRY_PAUSE_S = 2.0
OUTAGE_LOG_EVERY_S = 60.0
# Deliveries normally confirm in milliseconds: unconfirmed this long while the broker answers a
# metadata request (within PROBE_TIMEOUT_S), the producer is recreated at once (see _broker_answers).
# Producing again may double a result in the topic, which at-least-once allows (readers keep one).
WEDGED_AFTER_S = 5.0
PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class PipelineSettings:
    max_in_flight: int = 4  # windows between poll and commit
    delivery_timeout_s: float = 30.0  # a window's deliveries unconfirmed this long: the broker is gone

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {self.max_in_flight}")


class Pipeline:
    def __init__(
        self,
        engine: Engine,
        config: ModelConfig,
        topics: Topics,
        new_producer: Callable[[], Producer],
        settings: PipelineSettings | None = None,
        metrics: GpuMetrics | None = None,
        skip_job: Callable[[str, int | None], bool] = lambda job_id, submission: False,
    ) -> None:
        self.settings = settings or PipelineSettings()
        self._skip_job = skip_job
        self.ledger = Ledger()
        self._metrics = metrics or GpuMetrics()
        self._metrics.follow(self.ledger.in_flight)
        self._engine, self._config = engine, config
        self._emitter = Emitter(config, topics, runtime_of(engine), engine.postprocessed)
        self._new_producer = new_producer
        self._producer = new_producer()
        self._generation = 0  # delivery reports of a replaced producer are ignored
        self._probed_at = 0.0  # when _broker_answers last asked the broker
        # Live windows go to the engine before queued bulk ones: a live record waits for the
        # window running, not for every window in flight. A bulk window picked while both lanes
        # waited is the share guard's, and keeps its place: overtaken by every later live window,
        # it would never run under continuous live traffic. Within a lane the order is the poll
        # order, and the ledger still commits over the confirmed prefix, so no partition's
        # offsets reorder.
        self._to_engine: queue.PriorityQueue[tuple[int, int, tuple[Entry, Window, Lane, bool] | None]] = (
            queue.PriorityQueue()
        )
        self._submitted = 0  # the tie-break that keeps each lane first in, first out
        self._queued: dict[tuple[Lane, int], int] = {}  # windows not started yet, per lane and rank
        self._queued_lock = threading.Lock()
        # the engine's recent seconds per lane, for the bulk-share guard (set by the engine thread)
        self.engine_time = EngineTime()
        self._to_emit: queue.Queue[tuple[Entry, Window, Lane, Executed | Poisoned | Marker] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._threads = [
            threading.Thread(target=self._guard(self._engine_loop), name="nearline-engine", daemon=True),
            threading.Thread(target=self._guard(self._emit_loop), name="nearline-emit", daemon=True),
        ]
        for t in self._threads:
            t.start()

    # --- main thread ---

    def submit(
        self,
        window: Window,
        offsets: dict[TP, int],
        records: int,
        lane: Lane = "bulk",
        contended: bool = False,
        generation: int = 0,
    ) -> None:
        """Queue a prepared window for the engine; `offsets` are committed once its outputs are stored.
        `contended`: both lanes had records when it was picked, so its engine time counts toward
        the lanes' shares (gpu_consumer/lanes.py: LanePicker)."""
        self.check()
        entry = self.ledger.open(offsets, records, generation)
        rank = _FIRST if lane == "live" or contended else _BEHIND
        with self._queued_lock:
            self._queued[(lane, rank)] = self._queued.get((lane, rank), 0) + 1
        self._submitted += 1
        self._to_engine.put((rank, self._submitted, (entry, window, lane, contended)))

    def engine_idle(self) -> bool:
        """No window is queued for the engine or running on it."""
        return self._to_engine.unfinished_tasks == 0

    def window_waiting(self, lane: str = "bulk") -> bool:
        """A window that runs before one of `lane` is queued for the engine and not started yet:
        a window of `lane` closed now would wait too (a batch one waits for any, a live one only
        for those queued first)."""
        with self._queued_lock:
            return any(n for (_, rank), n in self._queued.items() if lane != "live" or rank == _FIRST)

    def queued(self, lane: str) -> int:
        """Windows of `lane` queued for the engine and not started yet."""
        with self._queued_lock:
            return sum(n for (queued_lane, _), n in self._queued.items() if queued_lane == lane)

    def check(self) -> None:
        """Raise what stopped a pipeline thread (an EngineFault: the worker exits, nothing more is
        committed); produce again what a failed or stalled delivery left unconfirmed."""
        if self._error is not None:
            raise self._error
        if self.ledger.failure is not None or self.ledger.stalled(self.settings.delivery_timeout_s):
            self._recover(
                self.ledger.failure or f"deliveries unconfirmed after {self.settings.delivery_timeout_s:.0f} s"
            )
        elif self.ledger.stalled(WEDGED_AFTER_S) and self._broker_answers():
            self._recover(
                f"deliveries unconfirmed for {WEDGED_AFTER_S:.0f} s while the broker answers: a broker "
                "restarted without its state no longer knows this producer"
            )

    def _broker_answers(self) -> bool:
        """Whether the broker answers a metadata request of this producer (asked at most every
        WEDGED_AFTER_S). A broker that answers while it confirms nothing for seconds restarted
        and lost this idempotent producer's id (librdkafka then retries UNKNOWN_PRODUCER_ID
        until delivery_timeout_s): the first job after a broker restart waited ~30 s for that.
        A frozen or unreachable broker does not answer, and the delivery_timeout_s rule stands."""
        now = time.monotonic()
        if now - self._probed_at < WEDGED_AFTER_S:
            return False
        self._probed_at = now
        try:
            self._producer.list_topics(timeout=PROBE_TIMEOUT_S)
        except KAFKA_FAULTS:
            return False
        return True

    def has_room(self, lane: str) -> bool:
        """Whether a window of `lane` may be submitted now: fewer than max_in_flight windows are
        between poll and commit, and a live window has one more place, so that it never waits
        for a bulk window to be committed before it can even be polled."""
        return self.ledger.in_flight() < self.settings.max_in_flight + (lane == "live")

    def finish(self, commit: Callable[[], None], timeout_s: float | None = None) -> bool:
        """Run every queued window to the end and commit it (before a revoke, or at the end)."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else 4 * self.settings.delivery_timeout_s)
        while True:
            self.check()
            commit()
            if not self.ledger.in_flight() or time.monotonic() >= deadline:
                return not self.ledger.in_flight()
            self.ledger.wait(0.05)

    def close(self) -> None:
        self._to_engine.put((_LAST, 0, None))  # after every queued window
        for t in self._threads:
            t.join(timeout=10)
        flush(self._producer, 5)

    def _recover(self, reason: str) -> None:
        """A broker that restarted without its state (Tansu memory storage) no longer knows this
        idempotent producer: librdkafka retries forever, or turns the producer fatal. Nothing
        unconfirmed was committed, so a new producer (a new id) sends all of it again. A broker
        that is still gone (down, frozen, unreachable) fails that too: then the worker waits it
        out, keeping what is unconfirmed and committing nothing, with a new producer every
        attempt (each attempt waits delivery_timeout_s for the broker, then RETRY_PAUSE_S), and
        says once a minute what it waits for. Exiting instead would crash-loop for as long as the
        outage lasts. An attempt that failed part way may have stored some records: the next one
        produces them again, which at-least-once allows (every reader keeps one per record)."""
        log.warning("%s; recreating the producer and producing the unconfirmed windows again", reason)
        self._quiesce()
        entries = self.ledger.unconfirmed()
        records = [r for e in entries for r in e.outputs]
        since, attempts, told = time.monotonic(), 0, 0.0
        while True:
            self._generation += 1
            discard(self._producer)
            self._producer = self._new_producer()
            attempts += 1
            try:
                produce_all(self._producer, records, self.settings.delivery_timeout_s)
                break
            except DeliveryError as exc:
                if time.monotonic() - told >= OUTAGE_LOG_EVERY_S:
                    told = time.monotonic()
                    log.warning(
                        "waiting for the broker to store %d results of %d windows (unconfirmed for %.0f s, "
                        "attempt %d: %s); nothing is committed until they are stored",
                        len(records),
                        len(entries),
                        told - since,
                        attempts,
                        exc,
                    )
            time.sleep(RETRY_PAUSE_S)
        if attempts > 1:
            log.warning(
                "the broker stored the %d unconfirmed results after %.0f s (%d attempts); resuming",
                len(records),
                time.monotonic() - since,
                attempts,
            )
        self.ledger.resolve(entries)

    def _quiesce(self) -> None:
        """Wait until every queued window has been executed and handed to the producer."""
        while self._to_engine.unfinished_tasks or self._to_emit.unfinished_tasks:
            if self._error is not None:
                raise self._error
            time.sleep(0.01)

    # --- pipeline threads ---

    def _guard(self, loop: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                loop()
            except BaseException as exc:  # handed to the main thread, which exits the worker
                self._error = exc
                self.ledger.fail(f"{threading.current_thread().name}: {exc}")

        return run

    def _engine_loop(self) -> None:
        try:
            while True:
                rank, _, job = self._to_engine.get()
                if job is None:
                    break
                entry, window, lane, contended = job
                with self._queued_lock:
                    self._queued[(lane, rank)] -= 1
                self._to_emit.put((entry, window, lane, "start"))
                started = time.perf_counter()
                for event in execute(self._engine, self._still_wanted(window), self._config):
                    self._to_emit.put((entry, window, lane, event))
                if contended:
                    self.engine_time = self.engine_time.served(lane, time.perf_counter() - started)
                self._to_emit.put((entry, window, lane, "end"))
                self._to_engine.task_done()
        finally:
            self._to_emit.put(None)

    def _still_wanted(self, window: Window) -> Window:
        """The window less its executed batches whose every record's job was cancelled or passed
        its deadline while the window waited for the engine (up to --max-windows-in-flight
        windows): those records are committed with the window and never run, as if skipped at
        the poll. A batch whose first record is wanted costs one question."""
        skip = self._skip_job
        kept = [
            planned
            for planned in window.planned
            if not all(skip(item.job_id, item.timestamps.get("submitted")) for item in planned.items)
        ]
        return window if len(kept) == len(window.planned) else replace(window, planned=kept)

    def _emit_loop(self) -> None:
        executed = 0
        while True:
            generation, producer = self._generation, self._producer
            try:
                serve_deliveries(producer)
            except DeliveryError as exc:  # a fatal producer: the main thread replaces it
                if generation == self._generation:
                    self.ledger.fail(str(exc))
            # Reports are served every 2 ms while some are due, so windows confirm (and commit)
            # promptly; with none due the thread sleeps until the engine hands it work, instead of
            # waking 500 times a second beside the engine's threads.
            try:
                job = self._to_emit.get(timeout=0.002 if awaiting_delivery(self._producer) else IDLE_EMIT_WAIT_S)
            except queue.Empty:
                continue
            if job is None:
                return
            entry, window, lane, event = job
            if event == "start":
                executed = 0
                self._produce(entry, window.dead)
            elif event == "end":
                self.ledger.seal(entry)
            elif isinstance(event, Poisoned):
                self._produce(entry, [self._emitter.dead(event)])
            else:
                assert isinstance(event, Executed)
                results = self._emitter.results(event, f"{window.window_id}.{executed}", window.formed_us)
                self._produce(entry, results)
                self._cache(self._emitter.cache.of(event.items, results))
                self._metrics.executed(event, lane)
                executed += 1
            self._to_emit.task_done()

    def _cache(self, records: list[OutRecord]) -> None:
        """Records for the results cache: produced beside the results, no part of any window's
        commit (best effort, gpu_consumer/cache_writes.py)."""
        if records:
            self._emitter.cache.send(self._producer, records)
            self._metrics.produced(records)

    def _produce(self, entry: Entry, records: list[OutRecord]) -> None:
        if not records:
            return
        self.ledger.sent(entry, records)  # kept until confirmed, to be produced again if need be
        generation, ledger = self._generation, self.ledger

        def on_stored() -> None:  # once per record: kept short
            if generation == self._generation:
                ledger.confirm(entry)

        def on_failed(reason: str) -> None:
            if generation == self._generation:
                ledger.fail(reason)

        try:
            send(self._producer, records, on_stored, on_failed)
        except DeliveryError as exc:  # a fatal producer: the main thread replaces it
            ledger.fail(str(exc))
        self._metrics.produced(records)
