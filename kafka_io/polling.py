"""Poll windows: a window closes at `max_records` records or `max_linger_ms` after its first record,
or at once when its consumer is at the end of every partition and the caller is in a hurry; its
linger is extended while the caller holds it (a window is already waiting for the engine).

A poll window is what one loop turn takes from Kafka and commits as a whole; it is not the
executed batch the engine runs (gpu_consumer/batcher.py cuts a window into those).

Also the drain mode (arq's "burst"): stop once every assigned partition has reported EOF. EOF
comes from the fetch high watermark, which is exact on every broker we run on, unlike
ListOffsets(latest) on Tansu (docs/brokers.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, OFFSET_STORED, Consumer, KafkaException, TopicPartition

from kafka_io.events import TP, consume_ready, take
from kafka_io.records import ConsumedRecord

log = logging.getLogger(__name__)


# How often a lingering window asks whether to close early (windows' `hurry`) or may close (`hold`).
HURRY_CHECK_S = 0.005


@dataclass(frozen=True)
class WindowLimits:
    """max_records counts records, not Kafka records: a pack (schemas/packs.py) counts as the
    records its `records` header names, and is never split across windows."""

    max_records: int = 256
    max_linger_ms: float = 20.0

    def __post_init__(self) -> None:
        if self.max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {self.max_records}")
        if self.max_linger_ms < 0:
            raise ValueError(f"max_linger_ms must be >= 0, got {self.max_linger_ms}")


@dataclass
class Assignment:
    """The partitions this consumer owns and which of them are caught up, kept by rebalance callbacks."""

    assigned: set[TP] = field(default_factory=set)
    at_eof: set[TP] = field(default_factory=set)
    revocations: int = 0
    # Runs before partitions go: the pipelined worker finishes and commits its windows in flight.
    # It runs inside the consumer's poll (a rebalance callback): it may commit (a plain blocking
    # call), but must not call list_topics() on the consumer. confluent-kafka keeps the state of
    # the poll that runs the callback in a per-client thread-local slot, and a list_topics() on
    # the same client clears that slot when it returns: the poll's next callback (an error_cb in
    # an outage) then aborts the process (CallState_get: Assertion `cs != NULL' failed).
    before_revoke: Callable[[], None] | None = None

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned |= {(p.topic, p.partition) for p in partitions}
        log.info("assigned %s", sorted(self.assigned))

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.before_revoke is not None:
            self.before_revoke()
        self._give_up(partitions)
        log.info("revoked %s", sorted((p.topic, p.partition) for p in partitions))

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The group dropped this member (its session timed out: a broker outage): the partitions
        are gone already, and no commit for them can succeed. Nothing is finished here: in an
        outage before_revoke would wait inside the poll, for as long as the outage lasts, for
        windows that cannot be committed, and a SIGTERM would not be seen until it ended. Windows
        in flight still commit later where the group takes it; what is never committed is
        consumed again."""
        self._give_up(partitions)
        log.warning(
            "lost %s (the group dropped this member); they are read again after a rejoin",
            sorted((p.topic, p.partition) for p in partitions),
        )

    def _give_up(self, partitions: list[TopicPartition]) -> None:
        gone = {(p.topic, p.partition) for p in partitions}
        self.assigned -= gone
        self.at_eof -= gone
        self.revocations += 1

    def caught_up(self) -> bool:
        return bool(self.assigned) and self.assigned <= self.at_eof


def subscribe(consumer: Consumer, topics: list[str]) -> Assignment:
    assignment = Assignment()
    consumer.subscribe(
        topics,
        on_assign=assignment.on_assign,
        on_revoke=assignment.on_revoke,
        on_lost=assignment.on_lost,
    )
    return assignment


def assign_all(consumer: Consumer, topic: str, partitions: list[int]) -> Assignment:
    """Take every partition of `topic` without joining the group: for a consumer that is known to
    be the only one (the embedded `nearline run`), which saves the join (seconds on Tansu). Reading
    starts at the group's committed offsets, and commits still go to the group."""
    return assign_topics(consumer, {topic: partitions})


def assign_topics(consumer: Consumer, partitions: dict[str, list[int]]) -> Assignment:
    """assign_all over several topics at once (a stage's lanes)."""
    assignment = Assignment()
    consumer.assign([TopicPartition(t, p, OFFSET_STORED) for t, ps in partitions.items() for p in ps])
    assignment.assigned = {(t, p) for t, ps in partitions.items() for p in ps}
    log.info("assigned %s without a group join", sorted(assignment.assigned))
    return assignment


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
    consumer: Consumer, assignment: Assignment, limits: WindowLimits, rules: WindowRules = WindowRules()
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

    Lanes (#35): `lane_of(topic)` names the lane of a record's topic, and a window holds records of
    one lane only, the one `pick(lanes with records)` names (the caller's policy), where a lane has
    records when some are held here or its partitions' high watermarks (librdkafka's cached ones,
    from every fetch) are past what was consumed. The lanes not picked are paused, which also drops
    what librdkafka had prefetched for them: a live record is not queued behind a fetched backfill.
    A paused partition is still polled (rebalances are served) and resumes once its lane is picked;
    its held records wait. `pick` may name no lane (None: the caller has no room for a window now,
    the pipelined worker with its windows in flight): then nothing is consumed and nothing paused
    or resumed, `tick` runs every few ms (finished windows are committed) and the lanes' waiting
    records are looked at again, so a live record that comes while the batch lane waits for room
    is taken in the live lane's own place. Rebalances are served once there is room (within a
    window's time). Without `lane_of` every record is in one lane, nothing is paused, and `pick`
    must name it."""
    drain, should_stop, idle_poll_s, tick, idle = (
        rules.drain,
        rules.should_stop,
        rules.idle_poll_s,
        rules.tick,
        rules.idle,
    )
    hurry, hold, lane_of, pick = rules.hurry, rules.hold, rules.lane_of, rules.pick
    linger_s = limits.max_linger_ms / 1000.0
    held: dict[str, list[ConsumedRecord]] = {}
    counts: dict[str, int] = {}  # the records (not Kafka records) held per lane
    per_message = 1  # records in the last Kafka record consumed: how many Kafka records to ask for
    first_at: dict[str, float] = {}
    lanes = _Lanes(consumer, assignment, lane_of) if lane_of is not None else None
    waiting: set[str] = set()  # lanes with records at the broker not consumed yet, as of the last poll
    revocations = assignment.revocations

    def hurried() -> bool:
        return assignment.caught_up() and hurry()

    def ready() -> set[str]:
        return {lane for lane, records in held.items() if records} | waiting

    def blocked() -> bool:
        """Some lane has records, but `pick` names none: the caller has no room for a window."""
        lanes_ready = ready()
        return bool(lanes_ready) and pick(sorted(lanes_ready)) is None

    def gathering() -> str | None:
        """The lane a window is gathered from now (None: no record is held in the lane picked)."""
        lanes_ready = ready()
        chosen = pick(sorted(lanes_ready)) if lanes_ready else None
        return chosen if chosen is not None and held.get(chosen) else None

    while True:
        lane = gathering()
        pending = held[lane] if lane is not None else []
        consuming = True
        if lane is not None:  # lingering: wait for more until the window is full or its linger is over
            wanted = -(-(limits.max_records - counts[lane]) // per_message)  # ceil: whole packs
            polled = consumer.consume(num_messages=max(wanted, 1), timeout=0)
            if not polled and not hurried():
                # Nothing queued: wait for the next record or partition end, a few ms at a time so
                # that an engine turning idle is noticed (consume() would wait for a full window).
                # Past the linger (held), wait a few ms at a time too: poll(0) would spin.
                timeout = first_at[lane] + linger_s - time.monotonic()
                first = consumer.poll(min(timeout, HURRY_CHECK_S) if timeout > 0 else HURRY_CHECK_S)
                polled = [first] if first is not None else []
        elif not blocked():
            # consume(n, timeout) would hold a small job's first records for the whole idle_poll_s
            polled = consume_ready(consumer, max(limits.max_records // per_message, 1), idle_poll_s)
        else:
            # Records wait, but the caller has no room for their lane: wait for its windows to
            # finish (tick commits them) without consuming, which keeps what librdkafka has
            # prefetched. Pausing instead dropped it, and with one window of one record in flight
            # every window waited for a fresh fetch: 10 records/s.
            consuming = False
            time.sleep(HURRY_CHECK_S)
            polled = []
        for msg in polled:
            record = take(msg, assignment.at_eof)
            if record is None:
                continue
            lane = lane_of(record.topic) if lane_of is not None else ""
            records = held.setdefault(lane, [])
            if not records:
                first_at[lane] = time.monotonic()
                counts[lane] = 0
            records.append(record)
            per_message = record.records
            counts[lane] += per_message
            if lanes is not None:
                lanes.consumed(record)
        if lanes is not None:
            waiting = lanes.waiting(timed=consuming)
        tick()
        if assignment.revocations != revocations:
            # Records of a partition given away will be redelivered to its new owner; processing
            # them here too would only make duplicates and commit offsets we no longer own: drop
            # every held record. A partition given back within this poll (revoke, then assign)
            # may have brought records of the new assignment in the same poll, read past its
            # committed offset: dropped too, they would never come again and the next window's
            # commit would skip them (a broker restart on Apache Kafka lost 80 of 1,200 records
            # so). Such a partition is read again from its committed offset.
            revocations = assignment.revocations
            dropped = {(r.topic, r.partition) for records in held.values() for r in records}
            held, counts = {}, {}
            rewind_to_committed(consumer, dropped & assignment.assigned, should_stop)
            if lanes is not None:
                lanes.reassigned()
                waiting = set()
                lanes.pause(set())
        lane = gathering()
        pending = held[lane] if lane is not None else []
        stopping = should_stop()
        if lane is not None and (
            stopping
            or counts[lane] >= limits.max_records
            or (time.monotonic() >= first_at[lane] + linger_s and not hold(lane))
            or (drain and assignment.caught_up())
            or hurried()
        ):
            cut, taken = _cut(pending, limits.max_records)
            window, held[lane] = pending[:cut], pending[cut:]
            counts[lane] -= taken
            if held[lane]:
                first_at[lane] = time.monotonic()
            yield window
        elif lane is None and not any(held.values()) and (stopping or (drain and assignment.caught_up())):
            return
        elif lane is None:
            idle()
        if lanes is not None:  # every lane with records but the one picked waits, paused
            lanes_ready = ready()
            chosen = pick(sorted(lanes_ready)) if lanes_ready else None
            if chosen is not None or not lanes_ready:  # blocked: paused and fetched stay as they are
                lanes.pause(lanes_ready - {chosen})


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


def records_in(window: Iterable[ConsumedRecord]) -> int:
    """The records a window holds: a pack counts as its records."""
    return sum(record.records for record in window)


# How long one ask for a rewound partition's committed offset may take, and the pause between asks
COMMITTED_TIMEOUT_S = 5.0
COMMITTED_RETRY_S = 1.0


def rewind_to_committed(consumer: Consumer, partitions: set[TP], should_stop: Callable[[], bool]) -> None:
    """Seek `partitions` to their committed offsets (the earliest where none is), where a fresh
    assignment starts. Asks until the broker answers: a partition left where it is would skip
    what was read and dropped."""
    if not partitions:
        return
    wanted = [TopicPartition(t, p) for t, p in sorted(partitions)]
    while True:
        try:
            committed = consumer.committed(wanted, timeout=COMMITTED_TIMEOUT_S)
            for tp in committed:
                offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
            log.warning(
                "records read past a revocation were dropped; reading again from the committed offsets %s",
                [(t.topic, t.partition, t.offset) for t in committed],
            )
            return
        except KafkaException as exc:
            if should_stop():
                return  # nothing of these partitions is committed past what was dropped; a new owner reads it
            log.warning("cannot rewind %s to the committed offsets yet (%s); asking again", sorted(partitions), exc)
            time.sleep(COMMITTED_RETRY_S)


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
                for c in self._consumer.committed([TopicPartition(t, p) for t, p in unknown], timeout=5):
                    self._next[(c.topic, c.partition)] = max(c.offset, 0)  # none committed: from 0
            except KafkaException:
                return set()  # the broker does not answer: nothing is known to wait
        found: set[str] = set()
        now = time.monotonic()
        for tp in self._assignment.assigned:
            high = self._consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)[1]
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
        if want - self._paused:
            self._consumer.pause([TopicPartition(t, p) for t, p in sorted(want - self._paused)])
        back = ((self._paused | fresh) - want) & assigned
        if back:
            self._consumer.resume([TopicPartition(t, p) for t, p in sorted(back)])
        self._paused = want


def consumer_lag(consumer: Consumer, partitions: Iterable[TP]) -> dict[TP, int]:
    """Records not yet consumed per partition: the high watermark of the last fetch minus the
    consumer's position. Both are local (fetches bring the watermark), so this costs no broker
    round trip; a partition with no position yet (nothing consumed from it) is left out."""
    wanted = [TopicPartition(t, p) for t, p in sorted(partitions)]
    if not wanted:
        return {}
    lags: dict[TP, int] = {}
    for tp in consumer.position(wanted):
        if tp.offset < 0:
            continue
        _, high = consumer.get_watermark_offsets(tp, cached=True)
        if high >= 0:
            lags[(tp.topic, tp.partition)] = max(0, high - tp.offset)
    return lags


def window_offsets(window: list[ConsumedRecord]) -> dict[TP, int]:
    """The offsets to commit once every output of the window is stored: last consumed + 1 per partition."""
    last: dict[TP, int] = {}
    for record in window:
        tp = (record.topic, record.partition)
        last[tp] = max(last.get(tp, -1), record.offset)
    return {tp: offset + 1 for tp, offset in last.items()}


def topic_partitions(offsets: dict[TP, int]) -> list[TopicPartition]:
    return [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]


def next_offsets(window: list[ConsumedRecord]) -> list[TopicPartition]:
    return topic_partitions(window_offsets(window))


def commit_offsets(consumer: Consumer, offsets: dict[TP, int]) -> None:
    consumer.commit(offsets=topic_partitions(offsets), asynchronous=False)
