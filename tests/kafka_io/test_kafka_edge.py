"""The Kafka edge against the real broker: topics, produce-and-confirm, following and reading topics,
commits, the clients' start-up checks. How a poll window closes is gpu_consumer.windows' (its tests:
tests/gpu_consumer/test_windows.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from gpu_consumer.windows import WindowRules, WindowSettings, windows
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import check_group_protocol, check_reachable, make_consumer, make_producer
from kafka_io.errors import BrokerUnavailableError, DeliveryError, GroupProtocolError
from kafka_io.polling import assign_all, commit_offsets, subscribe, window_offsets
from kafka_io.produce import fatal_error, produce_all
from kafka_io.reading import TopicFollower, read_topics
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics, partitions_of
from kafka_io.topology import Topics
from tests.support.waiting import wait_until


def fill(settings: KafkaSettings, topic: str, n: int, partitions: int = 2) -> None:
    ensure_topics(settings, [TopicSpec(topic, partitions)])
    produce_all(make_producer(settings), [OutRecord(topic, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(n)])


def test_topics_are_created_once_at_their_size(settings: KafkaSettings, topics: Topics) -> None:
    name = topics.results
    ensure_topics(settings, [TopicSpec(name, 3)])
    ensure_topics(settings, [TopicSpec(name, 5)])  # exists: left as it is, no error
    assert partitions_of(settings, name) == [0, 1, 2]


def test_produce_all_confirms_every_record(settings: KafkaSettings, topics: Topics) -> None:
    fill(settings, topics.raw_text, 250)
    values = sorted(m.value for m in read_topics(settings, [topics.raw_text]))
    assert values == sorted(f"v{i}".encode() for i in range(250))


def test_a_follower_hands_over_a_record_when_it_comes_not_when_its_poll_times_out(
    settings: KafkaSettings, topics: Topics
) -> None:
    """`nearline run` and `submit --wait` follow a job's results with TopicFollower.poll: one that
    waited for a full batch (consume()'s num_messages) would see the last results only at the end
    of its timeout, here 60 s."""
    ensure_topics(settings, [TopicSpec(topics.results, 1)])
    with TopicFollower(settings, [topics.results]) as follower:
        wait_until(follower.caught_up, 30, "the empty topic's end", every_s=0, meanwhile=lambda: follower.poll(1.0))
        threading.Timer(0.2, fill, (settings, topics.results, 1, 1)).start()
        started = time.monotonic()
        got: list[ConsumedRecord] = []
        while not got and time.monotonic() - started < 60:
            got = follower.poll(60)
        waited = time.monotonic() - started
    assert [r.value for r in got] == [b"v0"]
    assert waited < 30, f"the record came {waited:.0f} s after it was produced"


def test_reading_a_small_topic_to_its_end_does_not_wait_out_librdkafka_s_offset_timer(
    settings: KafkaSettings, topics: Topics
) -> None:
    """Every table read (the job registry behind status, jobs list, results) assigns its consumer
    at the beginning. One that has not seen the topic's metadata yet looks that offset up again
    only after librdkafka's fixed 500 ms, so no read could take less: the best of three must."""
    fill(settings, topics.jobs, 10, partitions=4)
    took = []
    for _ in range(3):
        started = time.monotonic()
        assert len(list(read_topics(settings, [topics.jobs]))) == 10
        took.append(time.monotonic() - started)
    assert min(took) < 0.45, f"reads took {', '.join(f'{t:.2f}' for t in took)} s"


def test_committed_offsets_are_where_a_new_member_resumes(settings: KafkaSettings, topics: Topics) -> None:
    fill(settings, topics.raw_text, 20, partitions=1)
    group = topics.gpu_group("resume")
    consumer = make_consumer(settings, group)
    assignment = subscribe(consumer, [topics.raw_text])
    first = next(windows(consumer, assignment, WindowSettings(max_records=8, max_linger_ms=5000)))
    commit_offsets(consumer, window_offsets(first))
    consumer.close()

    again = make_consumer(settings, group)
    assignment = subscribe(again, [topics.raw_text])
    rest = [m for b in windows(again, assignment, WindowSettings(8, 50), WindowRules(drain=True)) for m in b]
    committed = again.committed([TopicPartition(topics.raw_text, 0)], timeout=10)
    again.close()
    assert [m.offset for m in first] == list(range(8))
    assert [m.offset for m in rest] == list(range(8, 20))
    assert committed[0].offset == 8


def test_a_sole_consumer_reads_every_partition_without_a_join_and_commits_to_its_group(
    settings: KafkaSettings, topics: Topics
) -> None:
    fill(settings, topics.raw_text, 30, partitions=3)
    group = topics.gpu_group("sole")
    consumer = make_consumer(settings, group)
    assignment = assign_all(consumer, topics.raw_text, [0, 1, 2])
    first = next(windows(consumer, assignment, WindowSettings(max_records=12, max_linger_ms=5000)))
    commit_offsets(consumer, window_offsets(first))
    consumer.close()
    # a group member that joins later starts where the sole consumer committed
    again = make_consumer(settings, group)
    rest = [
        m
        for b in windows(again, subscribe(again, [topics.raw_text]), WindowSettings(50, 50), WindowRules(drain=True))
        for m in b
    ]
    again.close()
    seen = sorted(m.value or b"" for m in [*first, *rest])
    assert len(first) == 12
    assert seen == sorted(f"v{i}".encode() for i in range(30))  # each record once: nothing lost or repeated


def test_the_consumer_group_protocol_is_refused_at_start_by_a_broker_without_it(settings: KafkaSettings) -> None:
    # Tansu has no ConsumerGroupHeartbeat: a KIP-848 consumer there never joins and says nothing
    check_group_protocol(settings, "classic")
    with pytest.raises(GroupProtocolError, match="--group-protocol classic"):
        check_group_protocol(settings, "consumer")


def test_a_consumer_of_the_consumer_group_protocol_leaves_out_what_its_broker_decides(settings: KafkaSettings) -> None:
    # librdkafka refuses session.timeout.ms, heartbeat.interval.ms and partition.assignment.strategy
    # with group.protocol=consumer: made without them, the consumer is made
    make_consumer(settings, "kip848", **{"group.protocol": "consumer"}).close()
    with pytest.raises(KafkaException, match=r"group\.protocol=consumer"):
        make_consumer(settings, "kip848", **{"group.protocol": "consumer", "session.timeout.ms": 6000})


def test_an_unreachable_broker_fails_fast_naming_the_servers() -> None:
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match=r"127\.0\.0\.1:1"):
        check_reachable(KafkaSettings("127.0.0.1:1"), timeout_s=2)
    assert time.monotonic() - started < 10


@pytest.mark.process
def test_a_producer_that_outlived_a_broker_restart_fails_as_a_delivery_error(tmp_path: Path) -> None:
    """The broker lost every producer id: librdkafka either retries forever or turns the producer
    fatal (OUT_OF_ORDER_SEQUENCE_NUMBER, raised from flush). Both must reach the caller as the one
    DeliveryError the workers recover from."""
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    try:
        settings = KafkaSettings(broker.bootstrap_servers)
        records = [OutRecord("restarted", f"v{i}".encode(), key=f"k{i}".encode()) for i in range(40)]
        ensure_topics(settings, [TopicSpec("restarted", 4)])
        producer = make_producer(settings)
        assert produce_all(producer, records) == 40
        broker.stop()
        broker = EmbeddedBroker.start(tmp_path / "broker2.log", port=broker.port)
        ensure_topics(settings, [TopicSpec("restarted", 4), TopicSpec("other")])
        # The new broker hands out producer ids from the start again: the old producer's id now
        # belongs to this one, and the old producer's sequence numbers are out of order.
        assert produce_all(make_producer(settings), [OutRecord("other", b"v")]) == 1
        with pytest.raises(DeliveryError):
            produce_all(producer, records, timeout_s=5)
    finally:
        broker.stop()


@pytest.mark.process
def test_a_broker_gone_mid_stream_ends_produce_all_with_what_was_stored(tmp_path: Path) -> None:
    """The broker dies after 500 records were confirmed; 5,000 more cannot go anywhere. librdkafka
    would hold them for its 5-minute delivery timeout, and a full queue would hold produce_all as
    long: the call ends timeout_s after the last delivery report instead, saying how many were stored."""
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    settings = KafkaSettings(broker.bootstrap_servers)
    ensure_topics(settings, [TopicSpec("gone", 2)])

    def records() -> Iterator[OutRecord]:
        for i in range(5500):
            if i == 500:
                # the first 500 confirmed (their reports reach produce_all's callbacks); a 2 s sleep
                # here left some unconfirmed on a loaded machine
                assert producer.flush(60) == 0
                broker.kill()
            yield OutRecord("gone", f"v{i}".encode(), key=f"k{i}".encode())

    producer = make_producer(settings, idempotent=False, **{"queue.buffering.max.messages": 1000})
    started = time.monotonic()
    try:
        with pytest.raises(DeliveryError, match="confirmed no record for 3 s") as raised:
            produce_all(producer, records(), timeout_s=3)
    finally:
        broker.stop()
    assert raised.value.confirmed == 500
    assert time.monotonic() - started < 30
    # What never left is dropped, not sent if the broker comes back: the producer holds no record.
    # len() is librdkafka's outq_len, which also counts events queued for the application: the dead
    # broker's transport errors, queued anew as librdkafka retries it (one was left after the
    # flush in a CI run). So it is read after serving them, until once empty; a held record would
    # keep it above 0 for its 5-minute delivery timeout.
    wait_until(lambda: producer.poll(0.1) >= 0 and len(producer) == 0, 10, "the producer holding no record")


def test_a_fatal_error_is_known_also_as_a_system_error_out_of_the_callbacks() -> None:
    fatal = KafkaException(KafkaError(KafkaError._FATAL, "out of order sequence", fatal=True))
    with_cause = SystemError("<built-in function monotonic> returned a result with an exception set")
    with_cause.__cause__ = fatal
    without = SystemError("<method 'flush' of 'cimpl.Producer' objects> returned NULL without setting an exception")
    assert fatal_error(fatal) == fatal_error(with_cause) == str(fatal.args[0])
    assert fatal_error(without) == f"client error: {without}"
    assert fatal_error(ValueError("x")) is None
