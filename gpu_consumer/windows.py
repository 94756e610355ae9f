"""Poll windows: a window closes at `max_records` records or `max_linger_ms` after its first record,
or at once when its consumer is at the end of every partition and the caller is in a hurry; its
linger is extended while the caller holds it (a window is already waiting for the engine).

A poll window is what one loop turn takes from Kafka and commits as a whole; it is not the
executed batch the engine runs (batcher.py cuts a window into those). The loop and its policy
(one lane at a time, hold, hurry, no room) are the GPU worker's; the consumer calls are kafka_io's
primitives (kafka_io/polling.py). tests/gpu_consumer/test_loop_policy.py drives it without a
broker.

Also the drain mode (arq's "burst"): stop once every assigned partition has reported EOF.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kafka_io.clients import Consumer
from kafka_io.errors import KAFKA_FAULTS
from kafka_io.polling import (
    Assignment,
    committed_offsets,
    consume_records,
    high_watermark,
    pause_partitions,
    resume_partitions,
    rewind_to_committed,
)
from kafka_io.records import TP, ConsumedRecord

# How often a lingering window asks whether to close early (windows' `hurry`) or may close (`hold`).
HURRY_CHECK_S = 0.005


@dataclass(frozen=True)
class WindowSettings:
    """max_records counts records, not Kafka records: a pack (schemas/packs.py) counts as the
    records its `records` header names, and is never split across windows."""

    max_records: int = 256
    max_linger_ms: float = 20.0

    def __post_init__(self) -> None:
        if self.max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {self.max_records}")
        if self.max_linger_ms < 0:
            raise ValueError(f"max_linger_ms must be >= 0, got {self.max_linger_ms}")


def _never() -> bool:
    return False


def _nothing() -> None:
    pass


def _first(lanes: list[str]) -> str | None:
    return lanes[0]


@dataclass(frozen=True)
class WindowRules:
    """What the caller decides about its windows, read by windows(): when to stop and whether to
    drain, what to run after polls, and its lane, hold and hurry rules (the GPU worker's are its
    commit step's and its lane picker's: gpu_consumer/worker.py). The defaults: one lane, never
    stop, nothing to run."""

    drain: bool = False
    should_stop: Callable[[], bool] = _never
    idle_poll_s: float = 0.5
    tick: Callable[[], None] = _nothing
    idle: Callable[[], None] = _nothing
    hurry: Callable[[], bool] = _never
    hold: Callable[[str], bool] = lambda lane: False
    lane_of: Callable[[str], str] | None = None
    pick: Callable[[list[str]], str | None] = _first


def windows(
    consumer: Consumer, assignment: Assignment, limits: WindowSettings, rules: WindowRules = WindowRules()
) -> Iterator[list[ConsumedRecord]]:
    """Yield poll windows of records under the caller's `rules` (WindowRules). `tick` runs after
    every poll, also while no record comes (the pipelined worker commits finished windows there);
    `idle` after a poll that left no record
    waiting, so it may seek without a window half-gathered (the exactly-once worker commits its
    open transaction there, and an abort rewinds).

    A window also closes before its linger once every assigned partition is at its end and
    `hurry()` says nothing would be gained by waiting (the pipelined worker: its engine is idle).
    Lingering then only holds records that are all here, while the engine waits for them: the
    router of a continuous-batching server starts an idle engine on what it has, the same way.

    A window also outlasts its linger, up to max_records, while `hold(lane)` says closing it would
    not run its records any sooner (the pipelined worker: a window it closed before, of its lane or
    one served first, is still waiting for the engine). It closes once that window starts, so
    behind a busy engine each window gathers for as long as the engine runs the one before: on a
    backlog, full windows that sort into full executed batches, instead of windows cut every
    linger into batches of a few records.

    Lanes: `lane_of(topic)` names the lane of a record's topic, and a window holds records of
    one lane only, the one `pick(lanes with records)` names (the caller's policy), where a lane has
    records when some are held here or its partitions' high watermarks (librdkafka's cached ones,
    from every fetch) are past what was consumed. The lanes not picked are paused, which also drops
    what librdkafka had prefetched for them: a live record is not queued behind a fetched backfill.
    A paused partition is still polled (rebalances are served) and resumes once its lane is picked;
    its held records wait. `pick` may name no lane (None: the caller has no room for a window now,
    the pipelined worker with its windows in flight): then nothing is consumed and nothing paused
    or resumed, `tick` runs every few ms (finished windows are committed) and the lanes' waiting
    records are looked at again, so a live record that comes while the bulk lane waits for room
    is taken in the live lane's own place. Rebalances are served once there is room (within a
    window's time). Without `lane_of` every record is in one lane, nothing is paused, and `pick`
    must name it."""
    gather = _Gathering(consumer, assignment, limits, rules)
    held, revocations = gather.held, assignment.revocations
    while True:
        polled, consuming = gather.poll(gather.lane())
        held.add(polled, gather.lanes)
        if gather.lanes is not None:
            gather.waiting = gather.lanes.waiting(timed=consuming)
        rules.tick()
        if assignment.revocations != revocations:
            revocations = assignment.revocations
            gather.revoked()
        lane = gather.lane()
        stopping = rules.should_stop()
        if lane is not None and gather.closes(lane, stopping):
            yield held.take(lane, limits.max_records)
        elif lane is None and held.empty() and (stopping or (rules.drain and assignment.caught_up())):
            return
        elif lane is None:
            rules.idle()
        gather.pause_others()


class _Held:
    """The records held per lane (a window is gathered in one lane), what they count as records,
    and when each lane's window began."""

    def __init__(self, lane_of: Callable[[str], str] | None) -> None:
        self._lane_of = lane_of
        self.records: dict[str, list[ConsumedRecord]] = {}
        self.counts: dict[str, int] = {}  # the records (not Kafka records) held per lane
        self.first_at: dict[str, float] = {}
        self.per_message = 1  # records in the last Kafka record consumed: how many Kafka records to ask for

    def add(self, polled: list[ConsumedRecord], lanes: _Lanes | None) -> None:
        if not polled:
            return
        lane_of, held, counts, per_message = self._lane_of, self.records, self.counts, self.per_message
        for record in polled:  # per record: locals only (the loop's ceiling is this loop)
            lane = lane_of(record.topic) if lane_of is not None else ""
            records = held.setdefault(lane, [])
            if not records:
                self.first_at[lane] = time.monotonic()
                counts[lane] = 0
            records.append(record)
            per_message = record.records
            counts[lane] += per_message
            if lanes is not None:
                lanes.consumed(record)
        self.per_message = per_message

    def empty(self) -> bool:
        return not any(self.records.values())

    def take(self, lane: str, max_records: int) -> list[ConsumedRecord]:
        """The lane's window: whole packs up to max_records records; what is left begins the next."""
        pending = self.records[lane]
        cut, taken = _cut(pending, max_records)
        window, self.records[lane] = pending[:cut], pending[cut:]
        self.counts[lane] -= taken
        if self.records[lane]:
            self.first_at[lane] = time.monotonic()
        return window

    def drop(self) -> set[TP]:
        """Forget every held record; the partitions they came from."""
        dropped = {(r.topic, r.partition) for records in self.records.values() for r in records}
        self.records, self.counts = {}, {}
        return dropped


class _Gathering:
    """windows()' state between polls and the questions it asks of it (windows()' docstring has
    the rules): which lane a window is gathered from, how long to poll, whether the window closes."""

    def __init__(self, consumer: Consumer, assignment: Assignment, limits: WindowSettings, rules: WindowRules) -> None:
        self._consumer, self._assignment, self._limits, self._rules = consumer, assignment, limits, rules
        self._linger_s = limits.max_linger_ms / 1000.0
        self.held = _Held(rules.lane_of)
        self.lanes = _Lanes(consumer, assignment, rules.lane_of) if rules.lane_of is not None else None
        self.waiting: set[str] = set()  # lanes with records at the broker not consumed yet, as of the last poll

    def _hurried(self) -> bool:
        return self._assignment.caught_up() and self._rules.hurry()

    def _picked(self) -> tuple[set[str], str | None]:
        """The lanes with records (held here, or waiting at the broker) and the one `pick` names."""
        ready = {lane for lane, records in self.held.records.items() if records} | self.waiting
        return ready, self._rules.pick(sorted(ready)) if ready else None

    def lane(self) -> str | None:
        """The lane a window is gathered from now (None: no record is held in the lane picked)."""
        _, chosen = self._picked()
        return chosen if chosen is not None and self.held.records.get(chosen) else None

    def poll(self, lane: str | None) -> tuple[list[ConsumedRecord], bool]:
        """The records of one poll, and whether it consumed at all."""
        consumer, at_eof, held, limits = self._consumer, self._assignment.at_eof, self.held, self._limits
        if lane is not None:  # lingering: wait for more until the window is full or its linger is over
            wanted = -(-(limits.max_records - held.counts[lane]) // held.per_message)  # ceil: whole packs
            # With nothing fetched, wait for the next record or partition end a few ms at a time,
            # so that an engine turning idle is noticed (a consume of n would wait for all n); past
            # the linger (held), a few ms at a time too (no wait would spin). In a hurry: no wait.
            timeout = held.first_at[lane] + self._linger_s - time.monotonic()
            wait = 0.0 if self._hurried() else (min(timeout, HURRY_CHECK_S) if timeout > 0 else HURRY_CHECK_S)
            return consume_records(consumer, at_eof, wanted, wait), True
        ready, chosen = self._picked()
        if not ready or chosen is not None:
            # what is fetched at once, else the first record within idle_poll_s: a small job's first
            # records are not held for the whole wait
            wanted = limits.max_records // held.per_message
            return consume_records(consumer, at_eof, wanted, self._rules.idle_poll_s), True
        # Records wait, but the caller has no room for their lane: wait for its windows to finish
        # (tick commits them) without consuming, which keeps what librdkafka has prefetched.
        # Pausing instead dropped it, and with one window of one record in flight every window
        # waited for a fresh fetch: 10 records/s.
        time.sleep(HURRY_CHECK_S)
        return [], False

    def closes(self, lane: str, stopping: bool) -> bool:
        """Whether the lane's window closes now."""
        held, rules = self.held, self._rules
        return (
            stopping
            or held.counts[lane] >= self._limits.max_records
            or (time.monotonic() >= held.first_at[lane] + self._linger_s and not rules.hold(lane))
            or (rules.drain and self._assignment.caught_up())
            or self._hurried()
        )

    def revoked(self) -> None:
        """Records of a partition given away will be redelivered to its new owner; processing them
        here too would only make duplicates and commit offsets we no longer own: drop every held
        record. A partition given back within this poll (revoke, then assign) may have brought
        records of the new assignment in the same poll, read past its committed offset: dropped
        too, they would never come again and the next window's commit would skip them (a broker
        restart on Apache Kafka lost 80 of 1,200 records so). Such a partition is read again from
        its committed offset."""
        dropped = self.held.drop()
        rewind_to_committed(self._consumer, dropped & self._assignment.assigned, self._rules.should_stop)
        if self.lanes is not None:
            self.lanes.reassigned()
            self.waiting = set()
            self.lanes.pause(set())

    def pause_others(self) -> None:
        """Every lane with records but the one picked waits, paused; while the caller has no room
        (no lane picked), paused and fetched stay as they are."""
        if self.lanes is None:
            return
        ready, chosen = self._picked()
        if chosen is not None or not ready:
            self.lanes.pause(ready - {chosen})


def _cut(pending: list[ConsumedRecord], max_records: int) -> tuple[int, int]:
    """How many of `pending`'s Kafka records make a window, and the records they hold: whole
    packs up to max_records records, at least one Kafka record (a pack may hold more alone)."""
    taken = pending[0].records
    cut = 1
    while cut < len(pending):
        more = pending[cut].records
        if taken + more > max_records:
            break
        taken += more
        cut += 1
    return cut, taken


# A lane picked for records its high watermark promised that have not come in this long is taken
# to have none (a transaction's commit marker is past the last record but never consumed): the
# other lanes must not stay paused for records that will never come.
PROMISE_TIMEOUT_S = 0.5


class _Lanes:
    """Which lanes have records at the broker not consumed yet, and pausing lanes' partitions."""

    def __init__(self, consumer: Consumer, assignment: Assignment, lane_of: Callable[[str], str]) -> None:
        self._consumer, self._assignment, self._lane_of = consumer, assignment, lane_of
        self._next: dict[TP, int] = {}  # the next offset to consume: committed, then as records come
        self._promised_since: dict[str, float] = {}
        self._assigned_seen: set[TP] = set()
        self._paused: set[TP] = set()

    def consumed(self, record: ConsumedRecord) -> None:
        self._next[(record.topic, record.partition)] = record.offset + 1
        self._promised_since.pop(self._lane_of(record.topic), None)

    def reassigned(self) -> None:
        self._next.clear()
        self._promised_since.clear()

    def waiting(self, timed: bool = True) -> set[str]:
        """The lanes with records at the broker not consumed yet. `timed`: whether what a high
        watermark promises may time out (see PROMISE_TIMEOUT_S); not while nothing is consumed
        (a paused partition, or a caller with no room), since nothing can come then."""
        unknown = [tp for tp in self._assignment.assigned if tp not in self._next]
        if unknown:
            try:
                for tp, offset in committed_offsets(self._consumer, unknown).items():
                    self._next[tp] = max(offset, 0)  # none committed: from 0
            except KAFKA_FAULTS:
                return set()  # the broker does not answer: nothing is known to wait
        found: set[str] = set()
        now = time.monotonic()
        for tp in self._assignment.assigned:
            high = high_watermark(self._consumer, tp)
            if high > self._next.get(tp, high):
                lane = self._lane_of(tp[0])
                if tp in self._paused or not timed:
                    # Not consumed, so nothing can come yet: a promise is timed only while its
                    # lane is consumed. Timed while paused, a backfill behind a live lane served
                    # for 0.5 s was taken to have no records.
                    self._promised_since.pop(lane, None)
                    found.add(lane)
                    continue
                since = self._promised_since.setdefault(lane, now)
                if now - since < PROMISE_TIMEOUT_S:
                    found.add(lane)
                else:  # promised, never came: nothing to wait for up to that watermark
                    self._next[tp] = high
        if not found:
            self._promised_since.clear()
        return found

    def pause(self, lanes: set[str]) -> None:
        """Pause the assigned partitions of `lanes`, resume the others paused before.

        A partition assigned since the last call is resumed too: librdkafka keeps a partition's
        pause through a revoke and a later assign of it, and the set of paused ones was dropped
        at the revoke, so without this it would stay paused for good."""
        assigned = set(self._assignment.assigned)
        fresh, self._assigned_seen = assigned - self._assigned_seen, assigned
        want = {tp for tp in assigned if self._lane_of(tp[0]) in lanes}
        pause_partitions(self._consumer, want - self._paused)
        resume_partitions(self._consumer, ((self._paused | fresh) - want) & assigned)
        self._paused = want
