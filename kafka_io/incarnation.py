"""Whether the broker a consumer reconnected to still holds the logs its positions point into.

A broker that restarts without its state (Tansu's memory storage) comes back with empty logs,
while a consumer of the group it forgot keeps fetching at its old positions until it rejoins.
Tansu answers a fetch past a log's end with nothing, not OFFSET_OUT_OF_RANGE
(docs/brokers.md), so once new records pass an old position they are read from there on,
and the ones before it are skipped: commit those offsets to the new broker and its group resumes
past records nobody read (a test lost 4 of 10 this way). So after a lost connection nothing is
committed until the broker has said who it is: every embedded broker start has a cluster id of
its own (kafka_io/broker.py), while a real Kafka cluster keeps its id, and its logs, across
restarts. Under a new id, what was polled in the group generation of the connection loss is
never committed; the rejoin that follows starts from the new group's offsets (none: the earliest).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError

from kafka_io.clients import log_error
from kafka_io.errors import KAFKA_FAULTS

log = logging.getLogger(__name__)

# librdkafka's codes for a connection lost (and retried by itself)
_LOST = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}
ASK_EVERY_S = 1.0
ASK_TIMEOUT_S = 2.0
HELD_WARN_S = 15.0  # commits held this long say so (and again as often): a worker that stalls says why


class BrokerIncarnation:
    """Pass `on_error` as the consumer's error_cb and set `generation` to the assignment's
    revocation count (kafka_io.polling.Assignment); ask `settled()` before every commit."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.generation: Callable[[], int] = lambda: 0
        self.cluster_id: str | None = None
        # the generation of the first connection loss not yet settled; None: nothing to doubt
        self._doubted: int | None = 0  # the id is not known yet at start
        self._asked_at = -ASK_EVERY_S
        self._doubted_at = clock()  # when commits began to wait on the broker's answer
        self._warned_at = self._doubted_at
        # windows polled in a generation up to this one read a broker's logs that are gone
        self.stale_through = -1

    def on_error(self, err: KafkaError) -> None:
        """librdkafka's error callback (on the thread that polls): logged, and a lost connection doubted."""
        log_error(err)
        if err.code() in _LOST and self._doubted is None:
            self._doubted = self.generation()
            self._doubted_at = self._warned_at = self._clock()

    @property
    def doubting(self) -> bool:
        """A connection loss is not explained yet."""
        return self._doubted is not None

    def settled(self, client: Consumer, *, ask: bool = True) -> bool:
        """False while a connection loss is unexplained (the broker does not answer yet): commit
        nothing. Asks the broker at most every ASK_EVERY_S, and never with ask=False: inside a
        rebalance callback a metadata request on the consumer that runs it aborts the process
        (kafka_io.polling.Assignment.before_revoke)."""
        if self._doubted is None:
            return True
        if not ask:
            return False
        now = self._clock()
        if now - self._asked_at < ASK_EVERY_S:
            return False
        self._asked_at = now
        try:
            cluster_id = client.list_topics(timeout=ASK_TIMEOUT_S).cluster_id
        except KAFKA_FAULTS as exc:
            if now - self._warned_at >= HELD_WARN_S:
                self._warned_at = now
                log.warning(
                    "nothing committed for %.0f s: the broker has not answered a metadata request (%s); "
                    "windows already read wait for it, and no new one is taken once the ledger is full",
                    now - self._doubted_at,
                    exc,
                )
            return False
        if self.cluster_id is not None and cluster_id != self.cluster_id:
            log.warning(
                "the broker came back as a new cluster (id %s, was %s): it lost its state; what was "
                "read before is not committed, and the group's partitions are read from their start",
                cluster_id,
                self.cluster_id,
            )
            self.stale_through = max(self.stale_through, self._doubted)
        self.cluster_id, self._doubted = cluster_id, None
        return True
