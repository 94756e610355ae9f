"""Lane lanes in the preprocess worker: which lane a record is in, and which lanes may go on.

A record's lane is the topic it came from (kafka_io.topology.Topics.lane): the live twin of a raw
topic is `live.<raw topic>`, and a record's tensors go to the same lane of its model's tensors
topic, so the GPU worker serves them in that lane too. Each lane has its own agent, its own
stream buffer and its own backpressure: a backfill that fills the bulk lane's buffer, or whose
GPU group lags past --max-tensor-lag, holds back the bulk lane only.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka_io.topology import LANES, LIVE_PREFIX, Lane, Topics


def topic_lane(topics: Topics, topic: str) -> Lane:
    """The lane of a stage topic of `topics`' namespace, told by its name alone."""
    return topics.lane_of(topic)


def batch_topic(topics: Topics, topic: str) -> str:
    """The batch-lane name of a stage topic in either lane (the topic itself when it is batch)."""
    if topic_lane(topics, topic) == "bulk":
        return topic
    prefix = f"{topics.namespace}." if topics.namespace else ""
    return prefix + topic[len(prefix + LIVE_PREFIX) :]


def model_of_tensors(topics: Topics, topic: str) -> str:
    """The model a tensors topic (either lane) carries."""
    return batch_topic(topics, topic)[len(topics.tensors("")) :]


def held_lanes(lags: Mapping[str, int], topics: Topics, max_lag: int | None) -> frozenset[Lane]:
    """The lanes whose preprocessing waits: those with a tensors topic whose GPU group lags more
    than `max_lag` records behind it. Per lane, so a batch backlog never pauses live records."""
    if max_lag is None:
        return frozenset()
    return frozenset(p for p in LANES if any(n > max_lag for t, n in lags.items() if topic_lane(topics, t) == p))


class RecordsPerPack:
    """Records per Kafka record this worker wrote to each tensor topic, to turn a GPU group's lag
    (kafka_io.offsets.group_lag counts Kafka records: packs) into records, the unit of
    --max-tensor-lag. An estimate: the mean over what this worker produced, 1 for a topic it has
    not written to yet (the lag of packs another worker wrote then counts one record a pack until
    this worker's own first batch, an undercount that holds back nothing it should not)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int]] = {}  # topic: (records, packs)

    def add(self, topic: str, records: int) -> None:
        held, packs = self._seen.get(topic, (0, 0))
        self._seen[topic] = (held + records, packs + 1)

    def records(self, topic: str, packs: int) -> int:
        held, seen = self._seen.get(topic, (1, 1))
        return round(packs * held / seen)
