"""Transactions against the real broker: what read_committed readers see, and where offsets land."""

from __future__ import annotations

import uuid

from confluent_kafka import TopicPartition

from gpu_consumer.windows import WindowLimits, windows
from kafka_io.clients import make_consumer, make_producer
from kafka_io.polling import subscribe
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord
from kafka_io.settings import KafkaSettings, Topics
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.transactions import OpenTransaction, make_transactional_producer, rewind


def test_a_committed_batch_shows_its_outputs_and_moves_its_offsets_an_aborted_one_shows_nothing(
    settings: KafkaSettings, topics: Topics
) -> None:
    source, sink, group = topics.raw_text, topics.results, topics.gpu_group("eos")
    ensure_topics(settings, [TopicSpec(source, 1), TopicSpec(sink, 1)])
    produce_all(make_producer(settings), [OutRecord(source, f"in{i}".encode()) for i in range(6)])
    consumer = make_consumer(settings, group)
    assignment = subscribe(consumer, [source])
    batch = next(windows(consumer, assignment, WindowLimits(3, 5000)))
    producer = make_transactional_producer(settings, f"test-{uuid.uuid4().hex[:8]}")

    # aborted by hand: nothing visible, the batch rewound
    producer.begin_transaction()
    producer.produce(sink, value=b"aborted")
    producer.abort_transaction(30)
    rewind(consumer, batch)
    again = next(windows(consumer, assignment, WindowLimits(3, 5000)))
    assert [m.offset for m in again] == [m.offset for m in batch]

    txn = OpenTransaction(producer, consumer, max_windows=2, max_age_s=60)
    txn.add(again, [OutRecord(sink, b"out" + (m.value or b"")) for m in again])
    assert not txn.due()
    assert txn.commit() == 3
    consumer.close()
    assert sorted(m.value for m in read_topics(settings, [sink])) == [b"outin0", b"outin1", b"outin2"]
    check = make_consumer(settings, group)
    (committed,) = check.committed([TopicPartition(source, 0)], timeout=10)
    check.close()
    assert committed.offset == 3


def test_one_transaction_spans_several_windows_and_shows_their_outputs_only_when_all_commit(
    settings: KafkaSettings, topics: Topics
) -> None:
    source, sink, group = topics.raw_text, topics.results, topics.gpu_group("eos-span")
    ensure_topics(settings, [TopicSpec(source, 1), TopicSpec(sink, 1)])
    produce_all(make_producer(settings), [OutRecord(source, f"in{i}".encode()) for i in range(6)])
    consumer = make_consumer(settings, group)
    assignment = subscribe(consumer, [source])
    polled = windows(consumer, assignment, WindowLimits(3, 5000))
    txn = OpenTransaction(
        make_transactional_producer(settings, f"test-{uuid.uuid4().hex[:8]}"), consumer, max_windows=2, max_age_s=60
    )
    for _ in range(2):
        window = next(polled)
        txn.add(window, [OutRecord(sink, b"out" + (m.value or b"")) for m in window])
    assert txn.due()  # two windows in: time to commit
    txn.producer.flush(10)  # every output is on the broker, in the open transaction
    assert list(read_topics(settings, [sink])) == []  # read_committed: none visible yet
    assert txn.commit() == 6
    consumer.close()
    assert sorted(m.value for m in read_topics(settings, [sink])) == [f"outin{i}".encode() for i in range(6)]
    check = make_consumer(settings, group)
    (committed,) = check.committed([TopicPartition(source, 0)], timeout=10)
    check.close()
    assert committed.offset == 6
