"""Where a GenerationStep's records go: one producer at a time, each send entered in the ledger
and confirmed there by its delivery report; a new producer sends again what a failed delivery
left unconfirmed. The emit thread's sends and a recovery take turns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpu_consumer.cache_writes import CacheWrites
from gpu_consumer.ledger import Entry, Ledger
from gpu_consumer.metrics import GpuMetrics
from kafka_io.clients import Producer
from kafka_io.errors import DeliveryError
from kafka_io.produce import discard, flush, produce_all, send, serve_deliveries
from kafka_io.records import OutRecord

log = logging.getLogger(__name__)

RETRY_PAUSE_S = 2.0


class ResultSender:
    """The producer of a window's records (results, dead letters) and of the results cache's."""

    def __init__(
        self,
        new_producer: Callable[[], Producer],
        ledger: Ledger,
        cache: CacheWrites,
        metrics: GpuMetrics,
        delivery_timeout_s: float,
    ) -> None:
        self._new_producer = new_producer
        self._producer = new_producer()
        self._generation = 0  # a report of a producer replaced since is not counted
        self._ledger, self._cache, self._metrics = ledger, cache, metrics
        self._delivery_timeout_s = delivery_timeout_s
        self._producing = threading.Lock()  # the emit thread's produce, and a recovery, one at a time

    @property
    def producer(self) -> Producer:
        return self._producer

    def serve(self) -> None:
        """Serve the producer's delivery reports; a failure of the producer in use fails the ledger."""
        generation, producer = self._generation, self._producer
        try:
            serve_deliveries(producer)
        except DeliveryError as exc:
            if generation == self._generation:
                self._ledger.fail(str(exc))

    def produce(self, entry: Entry, records: list[OutRecord], cached: OutRecord | None = None) -> None:
        """Produce `records` of a window, and `cached`, a result's record for the results cache
        (best effort: no part of the window's commit, gpu_consumer/cache_writes.py)."""
        if not records:
            return
        with self._producing:
            self._send(entry, records)
            if cached is not None:
                self._cache.send(self._producer, [cached])
                self._metrics.produced([cached])

    def recover(self, reason: str) -> None:
        """A new producer sends every unconfirmed result again, until the broker stores them (an
        outage is waited out, nothing committed meanwhile). The emit thread produces nothing while
        this runs, so the results counted as confirmed are exactly those sent again; windows whose
        sequences still decode stay open (pipeline.py's recovery seals its windows instead: there
        every window in flight has all its outputs once the engine queue is drained)."""
        log.warning("%s; recreating the producer and producing the unconfirmed results again", reason)
        with self._producing:
            entries = self._ledger.unconfirmed()
            records = [r for e in entries for r in e.outputs]
            while True:
                self._generation += 1
                discard(self._producer)
                self._producer = self._new_producer()
                try:
                    produce_all(self._producer, records, self._delivery_timeout_s)
                    break
                except DeliveryError as exc:
                    log.warning("waiting for the broker to store %d results: %s", len(records), exc)
                time.sleep(RETRY_PAUSE_S)
            self._ledger.resolve(entries, seal=False)

    def flush(self, timeout_s: float) -> None:
        flush(self._producer, timeout_s)

    def _send(self, entry: Entry, records: list[OutRecord]) -> None:
        self._ledger.sent(entry, records)
        generation, ledger = self._generation, self._ledger

        def on_stored() -> None:
            if generation == self._generation:
                ledger.confirm(entry)

        def on_failed(reason: str) -> None:
            if generation == self._generation:
                ledger.fail(reason)

        try:
            send(self._producer, records, on_stored, on_failed)
        except DeliveryError as exc:
            ledger.fail(str(exc))
        self._metrics.produced(records)
