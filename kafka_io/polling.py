"""The consumer's primitives for the poll loop: the assignment kept by rebalance callbacks,
consuming records (partition ends noted), pausing and resuming partitions, watermarks, committed
offsets, rewinding to them and committing. The loop that gathers records into poll windows, and
its policy (lanes, hold, hurry), are the GPU worker's: gpu_consumer/windows.py.

"Caught up" (a drain's end) comes from partition EOF, from the fetch high watermark, which is
exact on every broker we run on, unlike ListOffsets(latest) on Tansu (docs/brokers.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, OFFSET_STORED, Consumer, KafkaException, TopicPartition

from kafka_io.clients import as_refusal
from kafka_io.events import consume_ready, take
from kafka_io.records import TP, ConsumedRecord

log = logging.getLogger(__name__)


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


def consume_records(
    consumer: Consumer, at_eof: set[TP], max_messages: int, wait_s: float = 0.0
) -> list[ConsumedRecord]:
    """Up to max_messages Kafka records already fetched; if none, the first that comes within
    wait_s with whatever was fetched alongside it (events.consume_ready). A partition's end is
    added to `at_eof`, a record of it removes it (events.take)."""
    polled = consume_ready(consumer, max(max_messages, 1), wait_s)
    return [record for msg in polled if (record := take(msg, at_eof)) is not None]


def committed_offsets(consumer: Consumer, partitions: Iterable[TP], timeout_s: float = 5.0) -> dict[TP, int]:
    """The group's committed offset of each partition (-1 where none); KAFKA_FAULTS when the
    broker does not answer."""
    wanted = [TopicPartition(t, p) for t, p in sorted(partitions)]
    try:
        return (
            {(c.topic, c.partition): c.offset for c in consumer.committed(wanted, timeout=timeout_s)} if wanted else {}
        )
    except KafkaException as exc:
        raise as_refusal(exc, "Describe") or exc from None


def high_watermark(consumer: Consumer, tp: TP) -> int:
    """The partition's high watermark as the last fetch brought it (no broker round trip)."""
    return int(consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)[1])


def pause_partitions(consumer: Consumer, partitions: Iterable[TP]) -> None:
    """Stop fetching these; librdkafka drops what it had prefetched of them."""
    if wanted := [TopicPartition(t, p) for t, p in sorted(partitions)]:
        consumer.pause(wanted)


def resume_partitions(consumer: Consumer, partitions: Iterable[TP]) -> None:
    if wanted := [TopicPartition(t, p) for t, p in sorted(partitions)]:
        consumer.resume(wanted)


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
            if (refused := as_refusal(exc, "Describe")) is not None:
                raise refused from None
            if should_stop():
                return  # nothing of these partitions is committed past what was dropped; a new owner reads it
            log.warning("cannot rewind %s to the committed offsets yet (%s); asking again", sorted(partitions), exc)
            time.sleep(COMMITTED_RETRY_S)


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
    """Commit synchronously; KafkaAuthorizationError where the group may not be read (a commit is
    Read on the group), which no later commit would mend."""
    try:
        consumer.commit(offsets=topic_partitions(offsets), asynchronous=False)
    except KafkaException as exc:
        raise as_refusal(exc, "Read") or exc from None
