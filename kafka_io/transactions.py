"""Exactly-once consume -> process -> produce, with Kafka transactions (KIP-447).

A batch's outputs and its consumed offsets commit in one transaction: readers with
isolation.level=read_committed (our default) see the outputs exactly when the offsets move, and a
crash or abort shows them neither. Zombie workers are fenced by the consumer-group metadata sent
with the offsets, so the transactional id only has to be stable per worker instance.

On Tansu, commit, abort and send_offsets_to_transaction work, but a crashed transaction is made
visible instead of aborted (shared/docs/tansu.md): crash-time exactly-once holds on Kafka only.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from kafka_io.clients import make_producer
from kafka_io.polling import next_offsets, tp_of
from kafka_io.produce import produce_one
from kafka_io.records import OutRecord
from kafka_io.settings import KafkaSettings

log = logging.getLogger(__name__)


class TransactionAbortedError(RuntimeError):
    """The batch's transaction was aborted and its records rewound: they will be consumed again."""


def make_transactional_producer(settings: KafkaSettings, transactional_id: str, timeout_s: float = 30.0) -> Producer:
    producer = make_producer(settings, idempotent=True, **{"transactional.id": transactional_id})
    producer.init_transactions(timeout_s)  # fences any older producer with this id
    return producer


def commit_in_transaction(
    producer: Producer, consumer: Consumer, records: list[OutRecord], batch: list[Message], timeout_s: float = 60.0
) -> None:
    """Produce `records` and commit `batch`'s offsets atomically, or abort and rewind the batch."""
    producer.begin_transaction()
    try:
        for record in records:
            produce_one(producer, record)
        producer.send_offsets_to_transaction(next_offsets(batch), consumer.consumer_group_metadata(), timeout_s)
        producer.commit_transaction(timeout_s)
    except KafkaException as exc:
        error = exc.args[0]
        if not error.txn_requires_abort():
            raise  # fatal (fenced) or retriable beyond our patience: the worker exits, Kafka redelivers
        log.warning("transaction aborted (%s); the batch will be consumed again", error.str())
        producer.abort_transaction(timeout_s)
        rewind(consumer, batch)
        raise TransactionAbortedError(error.str()) from exc


def rewind(consumer: Consumer, batch: list[Message]) -> None:
    """Seek each partition back to the batch's first offset on it."""
    first: dict[tuple[str, int], int] = {}
    for msg in batch:
        tp = tp_of(msg)
        first[tp] = min(first.get(tp, msg.offset() or 0), msg.offset() or 0)
    for (topic, partition), offset in first.items():
        consumer.seek(TopicPartition(topic, partition, offset))
