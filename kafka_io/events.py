"""What consume() returns, made into nearline's records: the one place that reads confluent's
Message, and the one rule for the events that are not records (EOF, errors)."""

from __future__ import annotations

import logging
from typing import cast

from confluent_kafka import KafkaError, KafkaException, Message

from kafka_io.records import ConsumedRecord

log = logging.getLogger(__name__)

TP = tuple[str, int]


def record_of(msg: Message) -> ConsumedRecord:
    # topic() and partition() are None only on client-level error events, never on records.
    value = msg.value()
    return ConsumedRecord(
        msg.topic() or "",
        msg.partition() or 0,
        msg.offset() or 0,
        value or b"",
        msg.key(),
        # a consumed record's headers are a list of (str, bytes | None); only a produced one's may be a dict
        tuple(cast(list[tuple[str, bytes | None]], msg.headers() or ())),
        msg.timestamp()[1],
        value is None,
    )


def take(msg: Message, at_eof: set[TP]) -> ConsumedRecord | None:
    """The record a consumed event carries, or None for any other event: a partition's EOF is
    added to `at_eof` (a record removes it), a fatal error raises, any other error is logged and
    passed over (librdkafka retries those itself)."""
    tp = (msg.topic() or "", msg.partition() or 0)
    err = msg.error()
    if err is None:
        at_eof.discard(tp)
        return record_of(msg)
    if err.code() == KafkaError._PARTITION_EOF:
        at_eof.add(tp)
    elif err.fatal():
        raise KafkaException(err)
    else:
        log.warning("consume: %s", err.str())
    return None
