"""The GPU loop's policy without a broker (tests/support/memory_consumer.py): how windows()
closes a window (size, whole packs, linger, hurry, hold), which lane it serves (the worker's
LanePicker: live first, the bulk lane paused meanwhile), what it does with no room, and what a
revocation does to what it holds. Each runs in milliseconds; the broker-backed tests of the same
loop (tests/gpu_consumer/test_windows.py, tests/jobs/test_lanes.py) stay for the Kafka edge."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import TopicPartition

from gpu_consumer.lanes import EngineTime, LanePicker
from gpu_consumer.windows import WindowRules, WindowSettings, windows
from kafka_io.polling import Assignment
from kafka_io.records import ConsumedRecord
from tests.support.memory_consumer import MemoryConsumer

LIVE, BATCH = "tensors.m.live", "tensors.m"


def lane_of(topic: str) -> str:
    return "live" if topic.endswith(".live") else "bulk"


def consumer_of(*partitions: tuple[str, int], committed: dict[tuple[str, int], int] | None = None) -> MemoryConsumer:
    consumer = MemoryConsumer(committed_offsets=dict(committed or {}))
    consumer.assign(set(partitions))
    return consumer


def assignment_of(consumer: MemoryConsumer) -> Assignment:
    return Assignment(assigned=set(consumer.assigned))


def offsets(window: list[ConsumedRecord]) -> list[tuple[str, int]]:
    return [(r.topic, r.offset) for r in window]


def test_a_window_closes_at_max_records_of_whole_packs_and_a_drain_ends_at_the_end() -> None:
    consumer = consumer_of((BATCH, 0))
    for i in range(5):
        consumer.append(BATCH, 0, f"pack {i}".encode().ljust(64, b"."), records=8)  # 8 bytes a record at least
    got = list(windows(consumer, assignment_of(consumer), WindowSettings(20, 10_000), WindowRules(drain=True)))  # type: ignore[arg-type]
    # 8 + 8 fit in 20, a third pack would not: packs are never split, and the last one closes at the end
    assert [[r.records for r in w] for w in got] == [[8, 8], [8, 8], [8]]
    assert [r.offset for w in got for r in w] == [0, 1, 2, 3, 4]


def test_a_window_waits_out_its_linger_unless_hurried_once_every_partition_is_at_its_end() -> None:
    consumer = consumer_of((BATCH, 0))
    for i in range(3):
        consumer.append(BATCH, 0, b"r%d" % i)
    started = time.monotonic()
    window = next(windows(consumer, assignment_of(consumer), WindowSettings(100, 100)))  # type: ignore[arg-type]
    assert len(window) == 3 and time.monotonic() - started >= 0.1

    consumer = consumer_of((BATCH, 0))
    consumer.append(BATCH, 0, b"r")
    started = time.monotonic()
    rules = WindowRules(hurry=lambda: True)  # the engine is idle: lingering would only keep it waiting
    window = next(windows(consumer, assignment_of(consumer), WindowSettings(100, 60_000), rules))  # type: ignore[arg-type]
    assert len(window) == 1 and time.monotonic() - started < 30


def test_a_held_window_outlasts_its_linger_and_gathers_what_comes_until_released() -> None:
    consumer = consumer_of((BATCH, 0))
    consumer.append(BATCH, 0, b"first")
    ticks = 0

    def tick() -> None:  # records keep coming while a window waits for the engine
        nonlocal ticks
        ticks += 1
        if ticks <= 3:
            consumer.append(BATCH, 0, b"more")

    rules = WindowRules(tick=tick, hold=lambda lane: ticks < 6)
    window = next(windows(consumer, assignment_of(consumer), WindowSettings(100, 0), rules))  # type: ignore[arg-type]
    assert [r.value for r in window] == [b"first", b"more", b"more", b"more"]


def picker(has_room: Callable[[str], bool] = lambda lane: True) -> LanePicker:
    return LanePicker(0.1, EngineTime, has_room, lambda lane: 0)


def test_the_live_lane_is_served_first_and_the_batch_lane_waits_paused() -> None:
    consumer = consumer_of((BATCH, 0), (LIVE, 0))
    for i in range(4):
        consumer.append(BATCH, 0, b"b%d" % i)  # the backfill is consumed first, and still waits
    for i in range(2):
        consumer.append(LIVE, 0, b"l%d" % i)
    paused_at_ticks: list[set[tuple[str, int]]] = []
    rules = WindowRules(lane_of=lane_of, pick=picker(), tick=lambda: paused_at_ticks.append(set(consumer.paused)))
    it = windows(consumer, assignment_of(consumer), WindowSettings(100, 50), rules)  # type: ignore[arg-type]
    first = next(it)
    assert offsets(first) == [(LIVE, 0), (LIVE, 1)]
    # while the live window lingered, the bulk lane's partitions were paused (librdkafka then drops
    # what it prefetched of them: a live record never queues behind a fetched backfill)
    assert {(BATCH, 0)} in paused_at_ticks and (LIVE, 0) not in set().union(*paused_at_ticks)
    second = next(it)
    assert offsets(second) == [(BATCH, i) for i in range(4)] and not consumer.paused


def test_with_no_room_for_a_window_nothing_more_is_consumed_and_finished_windows_still_commit() -> None:
    consumer = consumer_of((BATCH, 0))
    for i in range(3):
        consumer.append(BATCH, 0, b"r%d" % i)
    ticks, room = 0, False
    consumed_while_full: list[int] = []

    def tick() -> None:  # where the pipelined worker commits what finished
        nonlocal ticks, room
        ticks += 1
        if ticks == 1:
            for i in range(3, 6):  # more come, and wait at the broker: its watermark says so
                consumer.append(BATCH, 0, b"r%d" % i)
        if not room:
            consumed_while_full.append(len(consumer.consumed))
        room = ticks >= 5

    rules = WindowRules(lane_of=lane_of, pick=picker(lambda lane: room), tick=tick, hurry=lambda: True)
    it = windows(consumer, assignment_of(consumer), WindowSettings(100, 10_000), rules)  # type: ignore[arg-type]
    window = next(it)
    assert consumed_while_full == [3, 3, 3, 3, 3]  # what the first poll brought, then nothing while full
    # with room, the idle engine gets what is here at once; what waited at the broker comes next
    assert [r.value for r in window] == [b"r0", b"r1", b"r2"]
    assert [r.value for r in next(it)] == [b"r3", b"r4", b"r5"]


def test_records_held_at_a_revocation_are_dropped_and_read_again_from_the_committed_offset() -> None:
    consumer = consumer_of((BATCH, 0), committed={(BATCH, 0): 2})
    for i in range(10):
        consumer.append(BATCH, 0, b"r%d" % i)
    assignment = assignment_of(consumer)
    revoked = False

    def tick() -> None:
        """The partition revoked and given back within one poll (a broker restart): what was
        read past the committed offset must not be committed over by the next window."""
        nonlocal revoked
        if not revoked and consumer.consumed:
            revoked = True
            consumer.positions[(BATCH, 0)] = 10  # librdkafka's position ran on; the rewind must undo it
            gone = [TopicPartition(BATCH, 0)]
            assignment.on_revoke(consumer, gone)  # type: ignore[arg-type]
            assignment.on_assign(consumer, gone)  # type: ignore[arg-type]

    window = next(windows(consumer, assignment, WindowSettings(8, 10_000), WindowRules(tick=tick)))  # type: ignore[arg-type]
    assert revoked and [r.offset for r in window] == list(range(2, 10))
    assert [m.offset() for m in consumer.consumed] == [*range(2, 10), *range(2, 10)]  # read twice, handed on once
