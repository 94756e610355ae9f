"""Transactions against the real broker: what read_committed readers see, and where offsets land."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from gpu_consumer.windows import WindowSettings, windows
from kafka_io.clients import make_consumer, make_producer
from kafka_io.polling import subscribe
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import Topics
from kafka_io.transactions import OpenTransaction, TransactionWedgedError, make_transactional_producer, rewind


def test_a_committed_batch_shows_its_outputs_and_moves_its_offsets_an_aborted_one_shows_nothing(
    settings: KafkaSettings, topics: Topics
) -> None:
    source, sink, group = topics.raw_text, topics.results, topics.gpu_group("eos")
    ensure_topics(settings, [TopicSpec(source, 1), TopicSpec(sink, 1)])
    produce_all(make_producer(settings), [OutRecord(source, f"in{i}".encode()) for i in range(6)])
    consumer = make_consumer(settings, group)
    assignment = subscribe(consumer, [source])
    batch = next(windows(consumer, assignment, WindowSettings(3, 5000)))
    producer = make_transactional_producer(settings, f"test-{uuid.uuid4().hex[:8]}")

    # aborted by hand: nothing visible, the batch rewound
    producer.begin_transaction()
    producer.produce(sink, value=b"aborted")
    producer.abort_transaction(30)
    rewind(consumer, batch)
    again = next(windows(consumer, assignment, WindowSettings(3, 5000)))
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
    polled = windows(consumer, assignment, WindowSettings(3, 5000))
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


class RefusingProducer:
    """A transactional producer whose offsets call fails with `error` (the commit's first call)."""

    def __init__(self, error: KafkaError) -> None:
        self.error = error
        self.aborted = False

    def begin_transaction(self) -> None:
        pass

    def send_offsets_to_transaction(self, offsets: object, group: object, timeout_s: float) -> None:
        raise KafkaException(self.error)

    def abort_transaction(self, timeout_s: float) -> None:
        self.aborted = True


class GroupOnly:
    def consumer_group_metadata(self) -> object:
        return object()


@pytest.mark.parametrize(
    ("code", "replaced"),
    [(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, True), (KafkaError._FENCED, False), (KafkaError.PRODUCER_FENCED, False)],
)
def test_a_fatal_commit_replaces_the_producer_unless_another_one_fenced_it(code: int, replaced: bool) -> None:
    """A broker restarted with produce requests in flight can leave the idempotent producer out of
    sequence, a fatal error: the worker replaces it (TransactionWedgedError: a new producer with the
    same id fences it, and the committed offsets say where to resume) instead of exiting. Fenced,
    another worker holds the id now: the error is raised as it is, and the worker exits."""
    producer = RefusingProducer(KafkaError(code, "refused", fatal=True))
    txn = OpenTransaction(producer, GroupOnly(), max_windows=2, max_age_s=60)  # type: ignore[arg-type]
    window = [ConsumedRecord("ns.tensors.tiny", 0, n, b"x") for n in range(3)]
    txn.add(window, [])
    if replaced:
        with pytest.raises(TransactionWedgedError) as wedged:
            txn.commit(timeout_s=5)
        assert wedged.value.consumed == window and txn.windows == []
    else:
        with pytest.raises(KafkaException):
            txn.commit(timeout_s=5)
    assert not producer.aborted  # a fatal producer cannot abort; the new one's fencing does


class FailingProducer(RefusingProducer):
    """A transactional producer whose produce fails with `error` (librdkafka raises a producer's
    fatal error from every call once it has one)."""

    def produce(self, *args: object, **kwargs: object) -> None:
        raise KafkaException(self.error)


@pytest.mark.parametrize(
    ("code", "replaced"),
    [(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, True), (KafkaError._FENCED, False), (KafkaError.PRODUCER_FENCED, False)],
)
def test_a_fatal_produce_replaces_the_producer_unless_another_one_fenced_it(code: int, replaced: bool) -> None:
    """The same rule while producing a window's outputs into the transaction: a fatal producer that
    was not fenced is replaced, and every window of the transaction (the one being added too) is
    handed back to be read again from the committed offsets; a fenced one is raised as it is."""
    producer = FailingProducer(KafkaError(code, "refused", fatal=True))
    txn = OpenTransaction(producer, GroupOnly(), max_windows=3, max_age_s=60)  # type: ignore[arg-type]
    first = [ConsumedRecord("ns.tensors.tiny", 0, n, b"x") for n in range(3)]
    second = [ConsumedRecord("ns.tensors.tiny", 0, n, b"x") for n in range(3, 5)]
    txn.add(first, [])
    out = [OutRecord("ns.results", b"r")]
    if replaced:
        with pytest.raises(TransactionWedgedError) as wedged:
            txn.add(second, out)
        assert wedged.value.consumed == first + second and txn.windows == []
    else:
        with pytest.raises(KafkaException):
            txn.add(second, out)
    assert not producer.aborted
