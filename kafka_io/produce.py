"""Produce-and-confirm: a batch counts as written only when every delivery report says so."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from kafka_io.clients import as_refusal
from kafka_io.errors import DeliveryError, KafkaRefusedError
from kafka_io.records import OutRecord


def produce_one(
    producer: Producer, record: OutRecord, on_delivery: Callable[[KafkaError | None, Message], None] | None = None
) -> None:
    """producer.produce, waiting (while serving delivery reports) when its local queue is full."""
    while not _try_produce(producer, record, on_delivery):
        producer.poll(0.1)  # local queue full: let deliveries drain, then retry


def _try_produce(
    producer: Producer, record: OutRecord, on_delivery: Callable[[KafkaError | None, Message], None] | None
) -> bool:
    """producer.produce; False if its local queue is full."""
    # The record's own list, not a copy of it: produce only reads it (a list is invariant, hence
    # the ignore: typing.cast would cost ~0.2 µs a record at run time).
    headers: list[tuple[str, str | bytes | None]] | None = record.headers or None  # type: ignore[assignment]
    try:
        producer.produce(record.topic, record.value, record.key, headers=headers, on_delivery=on_delivery)
    except BufferError:
        return False
    return True


def fatal_error(exc: BaseException) -> str | None:
    """Why the producer is unusable, when `exc` says it is; None for any other exception.

    librdkafka's fatal error comes out of whichever call serves it, as a KafkaException. When
    delivery callbacks run while it is pending, confluent-kafka's callback machinery breaks: a
    SystemError comes out of the call instead, carrying the error as its cause ("... returned a
    result with an exception set") or nothing at all ("... returned NULL without setting an
    exception"). Either way the producer is given up."""
    if isinstance(exc, KafkaException):
        return str(exc.args[0])
    if isinstance(exc, SystemError):
        cause = exc.__cause__
        return str(cause.args[0]) if isinstance(cause, KafkaException) else f"client error: {exc}"
    return None


def _raise_if_fatal(exc: BaseException, confirmed: int = 0) -> None:
    """DeliveryError (make a new producer) from a producer call's exception when it says the
    producer turned fatal (fatal_error), with how many records the broker had confirmed; a plain
    try/except at each call, as serve_deliveries runs every few milliseconds on the emit thread."""
    fatal = fatal_error(exc)
    if fatal is not None:
        raise DeliveryError(f"producer failed: {fatal}", confirmed) from exc


def serve_deliveries(producer: Producer, timeout_s: float = 0.0) -> None:
    """Run the delivery callbacks of the reports that have arrived (waiting up to timeout_s for one).

    A producer that turned fatal raises DeliveryError (make a new one): librdkafka's fatal error
    comes out of whichever call serves it, this one as often as a produce."""
    try:
        producer.poll(timeout_s)
    except (KafkaException, SystemError) as exc:
        _raise_if_fatal(exc)
        raise


def awaiting_delivery(producer: Producer) -> int:
    """Records (and requests) handed to the producer whose delivery reports have not been served."""
    return len(producer)


def flush(producer: Producer, timeout_s: float) -> None:
    """Wait up to timeout_s for every queued record's delivery report."""
    producer.flush(timeout_s)


def discard(producer: Producer) -> None:
    """Drop whatever the producer still holds, so a replacement can send it again; a producer
    that turned fatal may refuse even this, and it is given up either way."""
    with contextlib.suppress(KafkaException):
        producer.purge()


def send(
    producer: Producer, records: Iterable[OutRecord], on_stored: Callable[[], None], on_failed: Callable[[str], None]
) -> None:
    """Hand records to the producer without waiting for the broker. Each record's delivery report
    calls on_stored() once the broker has it, or on_failed(reason); they arrive on whichever
    thread polls the producer. A producer that turned fatal raises DeliveryError (make a new one)."""

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            on_stored()
        else:
            on_failed(f"delivery to {msg.topic()} failed: {err.str()}")

    try:
        for record in records:
            if not _try_produce(producer, record, on_delivery):
                produce_one(producer, record, on_delivery)  # the local queue is full: wait for room
        producer.poll(0)
    except (KafkaException, SystemError) as exc:
        _raise_if_fatal(exc)
        raise


def produce_all(
    producer: Producer,
    records: Iterable[OutRecord],
    timeout_s: float = 60.0,
    *,
    weight: Callable[[bytes | None], int] | None = None,
) -> int:
    """Send every record and wait for all delivery reports; raise DeliveryError on any failure.

    `flush()` returning 0 only means the queue is empty, not that the broker stored the
    records: failures arrive in delivery reports, so those are what is counted. A producer that
    turned fatal (an idempotent producer whose sequence numbers a restarted broker no longer
    knows) raises from produce, poll or flush instead; that too is a DeliveryError, and the
    producer is unusable: the caller makes a new one.

    The first failure ends the call: no further record is produced, what is still queued is
    dropped, and DeliveryError.confirmed says how many the broker did store. The broker taking
    nothing for timeout_s, with the queue full or at the end, is a failure too.

    With `weight`, what is counted (returned, and in DeliveryError.confirmed) is weight(key) for
    each confirmed record: how many records a pack holds (schemas/packs.py). By key, because a
    delivery report carries the key but not the headers.
    """
    counts = _Deliveries(weight)
    try:
        return _produce_and_confirm(producer, records, timeout_s, counts)
    except (KafkaException, SystemError) as exc:
        _raise_if_fatal(exc, counts.weighed)
        raise
    except DeliveryError as exc:
        discard(producer)
        _serve_purged(producer)
        raise DeliveryError(str(exc), counts.weighed) from None


# How long the purged records' reports may take to reach the producer's queue: the broker threads
# fail their in-flight records asynchronously, after purge() returns.
PURGED_REPORTS_S = 5.0


def _serve_purged(producer: Producer) -> None:
    """Serve the purged records' reports (to the caller's counts), so the producer is left empty:
    one poll(0) right after purge() missed a report that a broker thread had not queued yet.
    flush() serves reports until none is left, and nothing is queued to send after the purge."""
    with contextlib.suppress(KafkaException):
        producer.flush(PURGED_REPORTS_S)


def produce_located(producer: Producer, record: OutRecord, timeout_s: float = 60.0) -> tuple[int, int]:
    """Send one record and wait for its delivery report: the partition and offset the broker
    stored it at (a log read back up to one's own entry: jobs/dlq_lock.py). DeliveryError if the
    broker did not take it within timeout_s."""
    where: list[tuple[int, int]] = []
    failures: list[str] = []
    refusals: list[KafkaRefusedError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(f"delivery to {msg.topic()} failed: {err.str()}")
            if (refused := as_refusal(err, "Write", msg.topic() or "")) is not None:
                refusals.append(refused)
        else:
            where.append((msg.partition() or 0, msg.offset() or 0))

    try:
        produce_one(producer, record, on_delivery)
        deadline = time.monotonic() + timeout_s
        while not where and not failures and time.monotonic() < deadline:
            producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
    except (KafkaException, SystemError) as exc:
        _raise_if_fatal(exc)
        raise
    if refusals:  # not a delivery to retry: the principal may not write there
        raise refusals[0]
    if failures:
        raise DeliveryError(failures[0])
    if not where:
        discard(producer)
        raise DeliveryError(f"a record to {record.topic} unconfirmed after {timeout_s:.0f} s")
    return where[0]


class _Deliveries:
    """What produce_all's delivery reports said. Counted by a plain closure (on_delivery), as
    before this class: how confluent-kafka calls a callback while a fatal error is pending is
    fragile, and a callable object there once gave a SystemError of another kind."""

    def __init__(self, weight: Callable[[bytes | None], int] | None = None) -> None:
        self.confirmed = 0  # Kafka records
        self.weighed = 0  # what they hold, by `weight` (else the same)
        self._weight = weight
        self.failures: list[str] = []
        self.refusals: list[KafkaRefusedError] = []  # failures that say the principal may not write
        self._reports_seen = 0
        self._since = time.monotonic()

    def on_delivery(self) -> Callable[[KafkaError | None, Message], None]:
        failures, refusals = self.failures, self.refusals
        weight = self._weight

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                failures.append(f"delivery to {msg.topic()} failed: {err.str()}")
                if (refused := as_refusal(err, "Write", msg.topic() or "")) is not None:
                    refusals.append(refused)
            else:
                self.confirmed += 1
                self.weighed += 1 if weight is None else weight(msg.key())

        return on_delivery

    def check_stall(self, producer: Producer, stall_s: float) -> None:
        """DeliveryError once no report has come for stall_s while records wait in a full queue.

        A broker gone mid-stream holds every record until librdkafka's own delivery timeout (5
        minutes), and a full queue would hold the caller as long, or longer."""
        now = time.monotonic()
        reports = self.confirmed + len(self.failures)
        if reports != self._reports_seen:
            self._reports_seen, self._since = reports, now
        elif now - self._since >= stall_s:
            raise DeliveryError(f"the broker confirmed no record for {stall_s:.0f} s while {len(producer)} waited")


# Delivery reports are served every this many records, not after each one: a poll costs a few
# microseconds even with nothing to serve, and a failure still stops the loop within these records.
_POLL_EVERY = 64


def _produce_and_confirm(
    producer: Producer, records: Iterable[OutRecord], timeout_s: float, counts: _Deliveries
) -> int:
    on_delivery = counts.on_delivery()
    sent = 0
    for record in records:
        if counts.failures:
            break
        while not _try_produce(producer, record, on_delivery):
            producer.poll(0.1)
            counts.check_stall(producer, timeout_s)
        sent += 1
        if sent % _POLL_EVERY == 0:
            producer.poll(0)

    deadline = time.monotonic() + timeout_s
    while counts.confirmed + len(counts.failures) < sent and not counts.failures and time.monotonic() < deadline:
        producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
    if counts.refusals:  # not a delivery to retry: the principal may not write there
        raise counts.refusals[0]
    if counts.failures:
        more = len(counts.failures) - 1
        raise DeliveryError(counts.failures[0] + (f" (and {more} more records)" if more else ""))
    if counts.confirmed < sent:
        raise DeliveryError(f"{sent - counts.confirmed} of {sent} records unconfirmed after {timeout_s:.0f} s")
    return counts.weighed
