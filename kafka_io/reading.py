"""Reading topics outside any consumer group: whole-topic scans and live follows, for results and DLQ views."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from kafka_io.clients import make_consumer, refusal
from kafka_io.errors import BrokerUnavailableError
from kafka_io.events import consume_ready, take
from kafka_io.records import TP, ConsumedRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import partitions_of

# A reader that stops at the end learns it is there from a fetch that finds nothing, which Tansu
# holds for the whole fetch.wait.max.ms: at the default 100 ms, a ten-row table took 0.16 s to
# read, at 10 ms 0.02-0.07 s. It asks again that soon only while it is reading.
READ_TO_END_FETCH_WAIT_MS = 10

# The throwaway group of a reader (assign(), no commits): librdkafka still asks for its
# coordinator, so a principal needs Describe on it (docs/deploy.md grants the prefix).
READER_GROUP_PREFIX = "nearline-reader-"

# A read that gets no record for this long asks whether the broker still takes connections: a
# killed one is known at once (refused), where the idle timeout alone took 64 s to say it. A slow
# or silent broker still takes them, and is left to the idle timeout.
REFUSAL_CHECK_AFTER_S = 3.0


class _Idle:
    """The time a read has gone without a record, and the verdict on it: the broker refused (at
    once, by refusal()), or nothing came for the whole idle timeout."""

    def __init__(self, settings: KafkaSettings, what: str, idle_timeout_s: float) -> None:
        self.settings, self.what, self.idle_timeout_s = settings, what, idle_timeout_s
        self.record()

    def record(self) -> None:
        self.last = time.monotonic()
        self.next_check = self.last + REFUSAL_CHECK_AFTER_S

    def check(self) -> None:
        """BrokerUnavailableError once the broker is known gone or the idle timeout is over."""
        now = time.monotonic()
        if now >= self.next_check:
            self.next_check = now + REFUSAL_CHECK_AFTER_S
            reason = refusal(self.settings)
            if reason is not None:
                raise BrokerUnavailableError(
                    f"reading {self.what}: Kafka at {self.settings.bootstrap_servers} went away: {reason}"
                )
        if now - self.last > self.idle_timeout_s:
            raise BrokerUnavailableError(
                f"reading {self.what} at {self.settings.bootstrap_servers}: no record for "
                f"{self.idle_timeout_s:.0f} s and not at the end"
            )


class TopicFollower:
    """All partitions of some topics from the beginning, by assign(): no group, no commits, no rebalance."""

    def __init__(
        self,
        settings: KafkaSettings,
        topics: list[str],
        *,
        fetch_wait_ms: int | None = None,
        only_partition: int | None = None,
        missing_ok: bool = False,
    ) -> None:
        """fetch_wait_ms: how long the broker may hold an empty fetch (kafka_io/clients.py): a
        follower nobody waits on asks less often than the default's ten times a second.
        only_partition: that partition of each topic, not all of them (one keyed log).
        missing_ok: none of the topics existing is no error but nothing to read (caught up at
        once), for a read to the end; a follower waiting on records that could never come fails.
        A missing topic is never created by asking (kafka_io/clients.py NO_AUTO_CREATE)."""
        extra = {} if fetch_wait_ms is None else {"fetch.wait.max.ms": fetch_wait_ms}
        # librdkafka wants a group.id even for assign(); a throwaway one that never commits.
        self._group = f"{READER_GROUP_PREFIX}{uuid.uuid4().hex[:12]}"
        self._consumer: Consumer = make_consumer(settings, group_id=self._group, **extra)
        self.partitions: set[tuple[str, int]] = set()
        for topic in topics:
            found = partitions_of(settings, topic, consumer=self._consumer)
            self.partitions |= {(topic, p) for p in found if only_partition in (None, p)}
        if not self.partitions and not missing_ok:
            self._consumer.close()
            raise BrokerUnavailableError(f"none of {topics} exists at {settings.bootstrap_servers}")
        self._consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in sorted(self.partitions)])
        self.at_eof: set[TP] = set()
        self._next: dict[TP, int] = {}  # offset after the last record returned

    def poll(self, timeout_s: float, max_records: int = 1000) -> list[ConsumedRecord]:
        if not self.partitions:  # nothing assigned: there is nothing to wait for
            return []
        out = []
        for msg in consume_ready(self._consumer, max_records, timeout_s):
            record = take(msg, self.at_eof, self._group)
            if record is not None:
                self._next[(record.topic, record.partition)] = record.offset + 1
                out.append(record)
        return out

    def caught_up(self) -> bool:
        """At the end as of the last poll; records written since may not be seen yet."""
        return self.at_eof >= self.partitions

    def poll_to_end(self, timeout_s: float = 30.0) -> list[ConsumedRecord]:
        """Every record written before this call. Unlike caught_up(), which an EOF from before the
        latest write can still satisfy, this asks the broker where each partition ends now.

        Tansu answers that query with the start of the last batch + 1, not its end
        (docs/brokers.md): exact for topics written one record per produce, as the
        schedule topics are; elsewhere the rest of that last batch may come in later polls."""
        ends = {}
        for topic, partition in self.partitions:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s, cached=False
            )
            ends[(topic, partition)] = (low, high)
        out: list[ConsumedRecord] = []
        deadline = time.monotonic() + timeout_s
        while any(self._next.get(tp, low) < high for tp, (low, high) in ends.items()):
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"could not read {sorted(self.partitions)} to the end in {timeout_s:.0f} s"
                )
            out.extend(self.poll(0.1))
        return out

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> TopicFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_topics(settings: KafkaSettings, topics: list[str], idle_timeout_s: float = 60.0) -> Iterator[ConsumedRecord]:
    """Every record the topics hold now, then stop: the end is each partition's EOF. A topic that
    does not exist holds none (a namespace where nothing was submitted yet), and is not created.
    However long the topics are, this fails only when no record comes for `idle_timeout_s` before
    the end (the time the caller spends on each record does not count: the clock restarts at every
    poll), or once the broker refuses connections, a few seconds into a wait."""
    with TopicFollower(settings, topics, fetch_wait_ms=READ_TO_END_FETCH_WAIT_MS, missing_ok=True) as follower:
        idle = _Idle(settings, str(topics), idle_timeout_s)
        while not follower.caught_up():
            batch = follower.poll(0.5)
            if batch:
                yield from batch
                idle.record()
            else:
                idle.check()


def read_range(
    settings: KafkaSettings,
    topic: str,
    start: dict[int, int],
    *,
    stop_offset: int | None = None,
    from_ms: int | None = None,
    to_ms: int | None = None,
    idle_timeout_s: float = 60.0,
) -> Iterator[ConsumedRecord]:
    """Records of `topic` from start[partition] until each partition's end, `stop_offset`
    (exclusive) or the first record after `to_ms`, skipping records before `from_ms`. Fails
    when no record comes for `idle_timeout_s` before the end or the broker refuses, as read_topics does."""
    group = f"{READER_GROUP_PREFIX}{uuid.uuid4().hex[:12]}"
    consumer = make_consumer(settings, group, **{"fetch.wait.max.ms": READ_TO_END_FETCH_WAIT_MS})
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in sorted(start.items())])
        active = set(start)
        at_eof: set[TP] = set()
        idle = _Idle(settings, topic, idle_timeout_s)
        while active:
            messages = consume_ready(consumer, 1000, 0.5)
            if messages:
                idle.record()
            else:
                idle.check()
            for msg in messages:
                if (msg.partition() or 0) not in active:
                    continue
                record = take(msg, at_eof, group)
                if record is None:
                    active -= {p for _, p in at_eof}
                    continue
                if (stop_offset is not None and record.offset >= stop_offset) or (
                    to_ms is not None and record.timestamp_ms > to_ms
                ):
                    active.discard(record.partition)
                    consumer.pause([TopicPartition(topic, record.partition)])
                    continue
                if from_ms is None or record.timestamp_ms >= from_ms:
                    yield record
    finally:
        consumer.close()
