"""The preprocess worker as the one member of its group: every partition, no group join.

For `nearline run`'s embedded pipeline only, as `nearline worker gpu --sole-consumer` is: on Tansu
a faust join costs a second before the first record is read (the broker holds the JoinGroup
for half the session timeout, and 1.0 s whether the session is 1 or 2 s), on the critical path of
every run.

Without a join, aiokafka commits with the "no generation" id, which Kafka and Tansu
accept from a consumer outside the group, so offsets land in the same group and a worker that later
joins it starts where this one stopped. Two sole consumers would both read everything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import faust
from aiokafka import TopicPartition
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer


def take_every_partition(app: faust.App, partitions: Mapping[str, Sequence[int]]) -> None:
    """Have `app`'s consumer assign itself `partitions` of each topic it subscribes to (topic name
    -> partition numbers, read from the broker before the worker starts) instead of joining."""
    known = {topic: list(numbers) for topic, numbers in partitions.items()}

    class SoleConsumerThread(AIOKafkaConsumerThread):
        _taken: frozenset[str] = frozenset()
        _assigning: asyncio.Future[None] | None = None  # held: the loop keeps only a weak reference

        async def subscribe(self, topics: Iterable[str]) -> None:
            await self.call_thread(self._take, frozenset(topics))

        async def _take(self, topics: frozenset[str]) -> None:  # on the consumer's own thread
            if topics == self._taken:  # faust subscribes again when it sees no new topic: keep positions
                return
            missing = sorted(topics - known.keys())
            if missing:
                raise ValueError(f"sole consumer: partitions of {missing} were not read before the start")
            assigned = [TopicPartition(t, p) for t in sorted(topics) for p in known[t]]
            self._ensure_consumer().assign(assigned)
            self._taken = topics
            # What aiokafka's coordinator calls once a join completes: faust pauses, seeks to the
            # committed offsets and starts fetching there. Scheduled, not awaited, as a join's
            # callback is: faust's handler waits for this very subscribe() to have returned.
            self._assigning = asyncio.ensure_future(self._rebalance_listener.on_partitions_assigned(assigned))

    class SoleConsumer(AIOKafkaConsumer):
        def _new_consumer_thread(self) -> Any:
            return SoleConsumerThread(self, loop=self.loop, beacon=self.beacon)

    # the transport builds the app's one consumer from this (class) attribute when the worker
    # starts; set on this app's transport only
    setattr(app.transport, "Consumer", SoleConsumer)  # noqa: B010
