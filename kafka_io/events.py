"""What consume() returns, made into nearline's records: the one place that reads confluent's
Message, and the one rule for the events that are not records (EOF, errors)."""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaError, KafkaException, Message

from kafka_io.clients import current_principal
from kafka_io.errors import AUTHORIZATION_CODES, refused_error
from kafka_io.records import TP, ConsumedRecord

log = logging.getLogger(__name__)


def record_of(msg: Message) -> ConsumedRecord:
    # topic() and partition() are None only on client-level error events, never on records.
    value = msg.value()
    # A consumed record's headers are a list of (str, bytes | None); only a produced one's may be
    # a dict. Not cast(): typing.cast and its subscripted type cost ~0.2 µs a record at run time.
    headers: list[tuple[str, bytes | None]] | None = msg.headers()  # type: ignore[assignment]
    return ConsumedRecord(
        msg.topic() or "",
        msg.partition() or 0,
        msg.offset() or 0,
        value or b"",
        msg.key(),
        tuple(headers) if headers else (),
        msg.timestamp()[1],
        value is None,
    )


def key_value(msg: Message) -> tuple[int, int, bytes | None, bytes | None]:
    """A record's partition, offset, key and value (None: a tombstone), for a reader that needs
    no more of it and reads many (the results cache's tail): a ConsumedRecord costs ~1 us more.
    Only for an event whose error() is None; take() says what the others are."""
    return msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value()


def take(msg: Message, at_eof: set[TP], group: str = "") -> ConsumedRecord | None:
    """The record a consumed event carries, or None for any other event: a partition's EOF is
    added to `at_eof` (a record removes it), a fatal error raises, and so does a denied read
    (KafkaAuthorizationError: no wait mends it), any other error is logged and passed over
    (librdkafka retries those itself)."""
    err = msg.error()
    if err is None:
        if at_eof:  # most records come with no partition at its end: no key to make
            at_eof.discard((msg.topic() or "", msg.partition() or 0))
        return record_of(msg)
    if err.code() == KafkaError._PARTITION_EOF:
        at_eof.add((msg.topic() or "", msg.partition() or 0))
    elif err.code() in AUTHORIZATION_CODES:  # `group`: the consumer's, where the caller names it
        on_group = err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        operation = "Describe" if on_group else "Read" if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED else ""
        resource = group if on_group else msg.topic() or ""
        raise refused_error(err, current_principal(), operation=operation, resource=resource) or KafkaException(err)
    elif err.fatal():
        raise KafkaException(err)
    else:
        log.warning("consume: %s", err.str())
    return None


def consume_ready(consumer: Consumer, max_records: int, timeout_s: float) -> list[Message]:
    """Up to max_records events: those already fetched, else the first that comes within
    timeout_s, with whatever was fetched alongside it.

    librdkafka's consume(n, timeout) returns early only once it holds n events: a record produced
    0.3 s into consume(1000, 2.0) came back at 2.0 s. Read that way, `nearline run` saw a job's
    last results up to 0.2 s late, and every read of a table to its end waited out 0.5 s.
    poll() returns on the first event."""
    polled = consumer.consume(num_messages=max_records, timeout=0)
    if polled or timeout_s <= 0:
        return polled
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(num_messages=max_records - 1, timeout=0)] if max_records > 1 else [first]
