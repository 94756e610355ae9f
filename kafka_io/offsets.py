"""Offsets: true partition ends, offsets for a time, committed offsets, resets.

End offsets come from a fetch's high watermark, never from ListOffsets(latest), which Tansu
answers wrongly (docs/brokers.md); on Kafka both agree, so this is exact on either.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

from kafka_io.clients import as_refusal, make_admin, make_consumer
from kafka_io.errors import BrokerUnavailableError, KafkaIOError
from kafka_io.events import consume_ready
from kafka_io.reading import READ_TO_END_FETCH_WAIT_MS
from kafka_io.settings import KafkaSettings
from kafka_io.topics import partitions_of


def end_offsets(settings: KafkaSettings, topic: str, timeout_s: float = 15.0) -> dict[int, int]:
    """The high watermark of each partition, read from a fetch response."""
    group = f"nearline-offsets-{uuid.uuid4().hex[:12]}"
    consumer = make_consumer(settings, group, **{"fetch.wait.max.ms": READ_TO_END_FETCH_WAIT_MS})
    try:
        parts = partitions_of(settings, topic, consumer=consumer)
        starts = []
        for p in parts:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            starts.append(TopicPartition(topic, p, max(low, high - 1) if high > 0 else OFFSET_BEGINNING))
        consumer.assign(starts)
        pending = set(parts)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for msg in consume_ready(consumer, 1000, 0.2):
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition() or 0)
                elif err is not None and (refused := as_refusal(err, "Read", topic)) is not None:
                    raise refused
        if pending:
            raise BrokerUnavailableError(f"no end of {topic} partitions {sorted(pending)} within {timeout_s:.0f} s")
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True)[1] for p in parts}
    finally:
        consumer.close()


def offsets_for_time(settings: KafkaSettings, topic: str, timestamp_ms: int, timeout_s: float = 15.0) -> dict[int, int]:
    """The first offset at or after `timestamp_ms` per partition (-1: none yet, i.e. the end); a
    time before 1970 is the first record of each partition.

    Kafka answers this from record timestamps; Tansu only at batch granularity from write time,
    so callers also filter records by timestamp (kafka_io.reading.read_range does)."""
    # ListOffsets reads a negative time as a special offset (-1 the end, -2 the start, -3 the
    # newest record) and refuses the others; no record is stamped before 1970, so asking for 0
    # finds the first one
    since = max(timestamp_ms, 0)
    consumer = make_consumer(settings, group_id=f"nearline-offsets-{uuid.uuid4().hex[:12]}")
    try:
        query = [TopicPartition(topic, p, since) for p in partitions_of(settings, topic)]
        return {tp.partition: tp.offset for tp in consumer.offsets_for_times(query, timeout=timeout_s)}
    finally:
        consumer.close()


def offsets_at_time(
    settings: KafkaSettings, topic: str, timestamp_ms: int, ends: dict[int, int] | None = None
) -> dict[int, int]:
    """Per partition, the first offset at or after `timestamp_ms`, or its end where none is yet;
    `ends`: the partitions' end offsets where the caller has read them already."""
    found = offsets_for_time(settings, topic, timestamp_ms)
    ends = ends if ends is not None else end_offsets(settings, topic)
    return {p: found[p] if found.get(p, -1) >= 0 else end for p, end in ends.items()}


@dataclass(frozen=True)
class GroupOffset:
    topic: str
    partition: int
    committed: int  # -1001: nothing committed
    end: int

    @property
    def lag(self) -> int:
        return self.end - max(self.committed, 0)


def group_offsets(settings: KafkaSettings, group: str, topic: str, timeout_s: float = 15.0) -> list[GroupOffset]:
    ends = end_offsets(settings, topic, timeout_s)
    consumer = make_consumer(settings, group_id=group)  # never subscribes: only asks the coordinator
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=timeout_s)
    except KafkaException as exc:
        raise as_refusal(exc, "Describe", group) or exc from None
    finally:
        consumer.close()
    return [GroupOffset(topic, tp.partition, tp.offset, ends[tp.partition]) for tp in committed]


def group_lag(settings: KafkaSettings, group: str, topic: str) -> int:
    """Records of `topic` the group has yet to consume, over all partitions."""
    return sum(o.lag for o in group_offsets(settings, group, topic))


def reset_group_offsets(settings: KafkaSettings, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Set a group's committed offsets. Kafka refuses while the group has members: stop them first."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])
    admin = make_admin(settings)  # held until the answer comes: a collected client never completes its futures
    future = admin.alter_consumer_group_offsets([request], request_timeout=30)[group]
    try:
        result = future.result(timeout=60)
    except KafkaException as exc:
        err = exc.args[0]
        if (refused := as_refusal(err, "Read", group)) is not None:
            raise refused from None
        if err.code() in _MEMBERS_ACTIVE:
            raise KafkaIOError(active_members_error(group)) from None
        raise KafkaIOError(f"resetting {group}: {err.str()}") from None
    failed = [tp for tp in result.topic_partitions if tp.error is not None]
    # the same refusal may come per partition instead of for the whole request (Tansu does that)
    if any(tp.error.code() in _MEMBERS_ACTIVE for tp in failed):
        raise KafkaIOError(active_members_error(group))
    if failed:
        raise KafkaIOError(f"resetting {group}: {failed[0].topic}/{failed[0].partition}: {failed[0].error.str()}")


_MEMBERS_ACTIVE = (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS)


def active_members_error(group: str) -> str:
    return f"group {group} has active members: stop its workers, then reset"
