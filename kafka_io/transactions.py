"""Exactly-once consume -> process -> produce, with Kafka transactions (KIP-447).

A window's outputs and its consumed offsets commit in one transaction: readers with
isolation.level=read_committed (our default) see the outputs exactly when the offsets move, and a
crash or abort shows them neither. Zombie workers are fenced by the consumer-group metadata sent
with the offsets, so the transactional id only has to be stable per worker instance.

On Tansu, commit, abort and send_offsets_to_transaction work, but a crashed transaction is made
visible instead of aborted (docs/brokers.md): crash-time exactly-once holds on Kafka only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kafka_io.clients import as_refusal, make_producer
from kafka_io.polling import next_offsets, records_in
from kafka_io.produce import produce_one
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import KafkaSettings

log = logging.getLogger(__name__)

# Fatal errors that say another producer took the transactional id over: the worker must not take
# it back (it exits; the group gives its partitions to whoever holds the id now).
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


class TransactionAbortedError(RuntimeError):
    """The transaction was aborted and its records rewound: they will be consumed again."""


class TransactionWedgedError(TransactionAbortedError):
    """A transactional call did not return within its timeout, and never will: librdkafka's
    send_offsets_to_transaction and commit_transaction, asked as the broker went down, can wait for
    ever (confluentinc/librdkafka#5456, open in 2.14). Whether the transaction committed is not
    known: the EndTxn may have reached the coordinator. The producer is abandoned (its call blocks a
    thread of its own, not the worker); a new one with the same transactional id fences it, which
    the coordinator answers once it has finished that transaction, and then the group's committed
    offsets say which way it went (resume_from_committed)."""

    def __init__(self, message: str, consumed: list[ConsumedRecord] | None = None) -> None:
        super().__init__(message)
        self.consumed = consumed or []


# Past a call's own timeout: how long it may still take to give up by itself.
WEDGED_GRACE_S = 5.0


def bounded(call: Callable[[], object], timeout_s: float) -> None:
    """Run a blocking transactional call in a thread of its own and wait at most timeout_s (its
    own timeout) plus WEDGED_GRACE_S; TransactionWedgedError past that, its exception if it failed."""
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the caller's thread as it is
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="transaction-call", daemon=True).start()
    if not done.wait(timeout_s + WEDGED_GRACE_S):
        raise TransactionWedgedError(f"a transactional call gave no answer in {timeout_s + WEDGED_GRACE_S:.0f} s")
    if failed:
        raise failed[0]


def make_transactional_producer(settings: KafkaSettings, transactional_id: str, timeout_s: float = 30.0) -> Producer:
    producer = make_producer(settings, idempotent=True, **{"transactional.id": transactional_id})
    try:
        producer.init_transactions(timeout_s)  # fences any older producer with this id
    except KafkaException as exc:
        raise as_refusal(exc, "Write", transactional_id) or exc from None
    return producer


def rewind(consumer: Consumer, window: list[ConsumedRecord]) -> None:
    """Seek each partition back to the window's first offset on it."""
    first: dict[tuple[str, int], int] = {}
    for record in window:
        tp = (record.topic, record.partition)
        first[tp] = min(first.get(tp, record.offset), record.offset)
    for (topic, partition), offset in first.items():
        seek_when_fetching(consumer, TopicPartition(topic, partition, offset))


# A seek refused while its partition's fetcher is not active is asked again this often, for at
# most this long: well under max.poll.interval.ms (5 min), since nothing is polled meanwhile.
SEEK_RETRY_S = 0.5
SEEK_PATIENCE_S = 60.0


def seek_when_fetching(consumer: Consumer, position: TopicPartition, patience_s: float = SEEK_PATIENCE_S) -> None:
    """Seek, once the partition is fetched again. librdkafka refuses a seek (_STATE, "Erroneous
    state") while a partition's fetcher is not active, as for seconds after its leader's broker
    restarted: the exactly-once worker died of it there (CI, tests/trials/test_apache_kafka.py), and
    a rewind that is skipped loses the window it rewinds. A partition no longer assigned is left
    alone: whoever is assigned it next starts at its committed offset. Past patience_s the error is
    raised: the worker exits and restarts from the committed offsets, losing nothing."""
    deadline = time.monotonic() + patience_s
    told = False
    while True:
        try:
            consumer.seek(position)
            return
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._STATE or time.monotonic() > deadline:
                raise
            if not any(
                (tp.topic, tp.partition) == (position.topic, position.partition) for tp in consumer.assignment()
            ):
                return
            if not told:
                log.warning("%s [%d] is not fetched yet (%s); seeking again", position.topic, position.partition, exc)
                told = True
            time.sleep(SEEK_RETRY_S)


def resume_from_committed(consumer: Consumer, window: list[ConsumedRecord], retry_s: float = 2.0) -> None:
    """Seek each partition of the window to the group's committed offset (read_committed waits for
    a transaction the coordinator is finishing: librdkafka asks for stable offsets): past the
    window if its transaction committed, at its start if it aborted. Asks until the broker answers."""
    first: dict[tuple[str, int], int] = {}
    for record in window:
        tp = (record.topic, record.partition)
        first[tp] = min(first.get(tp, record.offset), record.offset)
    while True:
        try:
            committed = consumer.committed([TopicPartition(t, p) for t, p in first], timeout=30)
            break
        except KafkaException as exc:
            log.warning("cannot read the group's committed offsets yet (%s); asking again", exc)
            time.sleep(retry_s)
    for position in committed:
        # none committed: nothing before the window was either, so it starts the partition's reading
        offset = position.offset if position.offset >= 0 else first[(position.topic, position.partition)]
        seek_when_fetching(consumer, TopicPartition(position.topic, position.partition, offset))


class OpenTransaction:
    """The outputs of one or more windows in one open transaction, committed with their offsets.

    Committing each window on its own costs an AddOffsets and an EndTxn round trip per window;
    spanning several amortises them, and the commit rule is unchanged: the outputs become visible
    exactly when the offsets of every window in the transaction move. An abort rewinds them all.
    """

    def __init__(self, producer: Producer, consumer: Consumer, *, max_windows: int, max_age_s: float) -> None:
        self.producer, self.consumer = producer, consumer
        self.max_windows, self.max_age_s = max_windows, max_age_s
        self.windows: list[list[ConsumedRecord]] = []
        self._opened_at = 0.0

    def add(self, window: list[ConsumedRecord], records: list[OutRecord]) -> None:
        """Produce a window's outputs in the transaction (opened on the first window).

        TransactionAbortedError after an abortable failure (every window rewound);
        TransactionWedgedError when the producer failed fatally but was not fenced (replace it)."""
        opening = not self.windows
        self.windows.append(window)
        try:
            if opening:
                self.producer.begin_transaction()
                self._opened_at = time.monotonic()
            for record in records:
                produce_one(self.producer, record)
        except KafkaException as exc:
            self._replace_if_fatal(exc)
            self._abort(exc)

    def due(self) -> bool:
        return len(self.windows) >= self.max_windows or (
            bool(self.windows) and time.monotonic() - self._opened_at >= self.max_age_s
        )

    def commit(self, timeout_s: float = 60.0) -> int:
        """Commit the open windows' outputs and offsets; the records committed (0 if none was open),
        a pack counting as the records it holds.

        TransactionAbortedError after an abortable failure: aborted, every window rewound."""
        if not self.windows:
            return 0
        consumed = [r for window in self.windows for r in window]
        offsets, group = next_offsets(consumed), self.consumer.consumer_group_metadata()
        try:
            bounded(lambda: self.producer.send_offsets_to_transaction(offsets, group, timeout_s), timeout_s)
            bounded(lambda: self.producer.commit_transaction(timeout_s), timeout_s)
        except TransactionWedgedError as exc:
            log.warning(
                "a transaction of %d windows got no answer (librdkafka#5456); its producer is replaced, "
                "and the group's committed offsets say whether they are consumed again",
                len(self.windows),
            )
            self.windows = []
            raise TransactionWedgedError(str(exc), consumed) from exc
        except KafkaException as exc:
            self._replace_if_fatal(exc)
            self._abort(exc, timeout_s)
        self.windows = []
        return records_in(consumed)

    def _replace_if_fatal(self, exc: KafkaException) -> None:
        """TransactionWedgedError for a fatal error that is not a fence. The producer is unusable
        but still owns its transactional id (an idempotence sequence lost as a broker restarted
        with messages in flight, while producing or committing): as with a wedged one, a new
        producer fences it, and the group's committed offsets say what was consumed. A fence is
        left to _abort: the id is another worker's now."""
        error = exc.args[0]
        if not (error.fatal() and error.code() not in FENCED):
            return
        consumed = [r for window in self.windows for r in window]
        log.warning(
            "a transaction of %d windows failed fatally (%s); its producer is replaced", len(self.windows), error.str()
        )
        self.windows = []
        raise TransactionWedgedError(error.str(), consumed) from exc

    def _abort(self, exc: KafkaException, timeout_s: float = 60.0) -> None:
        error = exc.args[0]
        if (refused := as_refusal(error)) is not None:
            raise refused from None  # no abort and retry mends a missing ACL
        if not error.txn_requires_abort():
            raise exc  # fatal (fenced) or retriable beyond our patience: the worker exits, Kafka redelivers
        consumed = [r for window in self.windows for r in window]
        log.warning(
            "transaction of %d windows aborted (%s); they will be consumed again", len(self.windows), error.str()
        )
        self.producer.abort_transaction(timeout_s)
        rewind(self.consumer, consumed)
        self.windows = []
        raise TransactionAbortedError(error.str()) from exc
