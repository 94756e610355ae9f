"""gpu_consumer.windows against the real broker: how a poll window closes (at its size in records,
packs whole; at its linger; at once for records that reach an idle worker) and how the GPU loop's
rules keep one open (hurry: the engine is busy; hold: a window already waits for it)."""

from __future__ import annotations

import threading
import time

from confluent_kafka import TopicPartition

from gpu_consumer.windows import WindowRules, WindowSettings, windows
from kafka_io.clients import make_consumer, make_producer
from kafka_io.polling import commit_offsets, records_in, subscribe, window_offsets
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord, pack_record
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import Topics
from tests.support.waiting import wait_until


def fill(settings: KafkaSettings, topic: str, n: int, partitions: int = 2) -> None:
    ensure_topics(settings, [TopicSpec(topic, partitions)])
    produce_all(make_producer(settings), [OutRecord(topic, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(n)])


def test_batches_close_at_size_then_drain_stops_at_the_end(settings: KafkaSettings, topics: Topics) -> None:
    fill(settings, topics.raw_text, 45)
    consumer = make_consumer(settings, topics.gpu_group("x"))
    assignment = subscribe(consumer, [topics.raw_text])
    sizes = []
    for batch in windows(
        consumer, assignment, WindowSettings(max_records=10, max_linger_ms=2000), WindowRules(drain=True)
    ):
        sizes.append(len(batch))
        commit_offsets(consumer, window_offsets(batch))
    consumer.close()
    assert sum(sizes) == 45
    assert max(sizes) == 10
    assert sizes.count(10) >= 3  # full batches close at size, not at the 2 s linger


def test_a_window_holds_whole_packs_and_closes_by_their_records(settings: KafkaSettings, topics: Topics) -> None:
    """#41: max_records counts records, a pack (its `records` header) as the records it holds, and a
    window never splits a pack: it ends before the pack that would take it past max_records,
    unless that pack comes first (larger than a window, it is a window alone)."""
    sizes = [4, 3, 5, 1, 6, 2, 10, 4]
    ensure_topics(settings, [TopicSpec(topics.raw_text, 1)])
    # each as long as a pack of n records is at least (8 bytes a record): a header is trusted no further
    packs = [
        pack_record(topics.raw_text, f"pack{i}".encode().ljust(8 * n, b"."), "job", f"r{i}", n)
        for i, n in enumerate(sizes)
    ]
    produce_all(make_producer(settings), packs)
    consumer = make_consumer(settings, topics.gpu_group("x"))
    assignment = subscribe(consumer, [topics.raw_text])
    got = []
    for window in windows(
        consumer, assignment, WindowSettings(max_records=8, max_linger_ms=5000), WindowRules(drain=True)
    ):
        got.append([r.records for r in window])
        assert records_in(window) == sum(got[-1])
        commit_offsets(consumer, window_offsets(window))
    consumer.close()
    # full windows close at 8 records, not at 8 Kafka records or the 5 s linger; the last at the end
    assert got == [[4, 3], [5, 1], [6, 2], [10], [4]]


def test_a_partial_batch_closes_after_the_linger(settings: KafkaSettings, topics: Topics) -> None:
    fill(settings, topics.raw_text, 3, partitions=1)
    consumer = make_consumer(settings, topics.gpu_group("x"))
    assignment = subscribe(consumer, [topics.raw_text])
    it = windows(consumer, assignment, WindowSettings(max_records=100, max_linger_ms=300))
    first = next(it)
    consumer.close()
    assert len(first) == 3


def test_records_that_arrive_while_idle_are_handed_over_after_the_linger_not_the_idle_wait(
    settings: KafkaSettings, topics: Topics
) -> None:
    """A small job's records reach an idle worker at once: an idle poll that waited for a full
    window (consume()'s num_messages) would hold them for its whole 60 s here."""
    ensure_topics(settings, [TopicSpec(topics.raw_text, 1)])
    consumer = make_consumer(settings, topics.gpu_group("x"))
    assignment = subscribe(consumer, [topics.raw_text])
    got: list[int] = []

    def first_window() -> None:
        it = windows(
            consumer, assignment, WindowSettings(max_records=100, max_linger_ms=50), WindowRules(idle_poll_s=60)
        )
        got.append(len(next(it)))

    worker = threading.Thread(target=first_window, daemon=True)
    worker.start()
    # the worker is idle, subscribed, with nothing to read
    wait_until(lambda: assignment.assigned, 30, "the idle worker's partitions assigned", every_s=0.1)
    fill(settings, topics.raw_text, 3, partitions=1)
    worker.join(30)
    came = list(got)  # before close(), which waits for a consume() in progress
    consumer.close()
    assert came == [3], "the window did not come within 30 s of its records"


def test_a_window_waits_out_its_linger_while_the_engine_is_busy_and_closes_once_it_is_idle(
    settings: KafkaSettings, topics: Topics
) -> None:
    """hurry(): with every partition at its end, lingering only holds records that are all here.
    The window (a 10-minute linger) stays open while hurry() says no (the engine is busy) and
    closes, with every record, as soon as it says yes."""
    fill(settings, topics.raw_text, 7, partitions=2)
    consumer = make_consumer(settings, topics.gpu_group("x"))
    assignment = subscribe(consumer, [topics.raw_text])
    engine_idle = threading.Event()
    got: list[bytes] = []

    def first_window() -> None:
        limits = WindowSettings(max_records=100, max_linger_ms=600_000)
        got.extend(r.value for r in next(windows(consumer, assignment, limits, WindowRules(hurry=engine_idle.is_set))))

    worker = threading.Thread(target=first_window, daemon=True)
    worker.start()
    # every record polled, both partitions at their end, the engine busy
    wait_until(assignment.caught_up, 30, "both partitions polled to their end")
    time.sleep(0.5)  # kept, a sleep: what is tested is that nothing closes the window meanwhile
    held = list(got)
    engine_idle.set()
    worker.join(30)
    came = list(got)  # before close(), which waits for a consume() in progress
    consumer.close()
    assert held == [], "the window closed while the engine was busy"
    assert sorted(came) == sorted(f"v{i}".encode() for i in range(7))


def test_a_held_window_outlasts_its_linger_and_gathers_what_comes_until_released(
    settings: KafkaSettings, topics: Topics
) -> None:
    """hold(): while a window already waits for the engine, the next one keeps gathering past its
    linger, so records produced after the linger join it; it closes once hold() says no."""
    fill(settings, topics.raw_text, 3, partitions=1)
    consumer = make_consumer(settings, topics.gpu_group("x"))
    assignment = subscribe(consumer, [topics.raw_text])
    released = threading.Event()
    got: list[list[bytes]] = []

    def hold(lane: str) -> bool:
        # Asked on the polling thread (the consumer is not shared across threads): held until
        # released, and then until the late records are in, so their arrival time does not matter.
        if not released.is_set():
            return True
        return consumer.position([TopicPartition(topics.raw_text, 0)])[0].offset < 7

    def first_window() -> None:
        limits = WindowSettings(max_records=100, max_linger_ms=50)
        got.append([r.value for r in next(windows(consumer, assignment, limits, WindowRules(hold=hold)))])

    worker = threading.Thread(target=first_window, daemon=True)
    worker.start()
    # the first three records polled: the window's 50 ms linger is running
    wait_until(assignment.caught_up, 30, "the partition polled to its end")
    time.sleep(0.5)  # kept, a sleep: ten times the linger, which is what the window must outlast
    held = list(got)
    produce_all(make_producer(settings), [OutRecord(topics.raw_text, f"late{i}".encode()) for i in range(4)])
    released.set()
    worker.join(30)
    came = list(got)
    consumer.close()
    assert held == [], "the window closed at its linger while one was waiting"
    assert came and sorted(came[0]) == sorted(
        [f"v{i}".encode() for i in range(3)] + [f"late{i}".encode() for i in range(4)]
    )
