"""A preprocess worker's offset commit that was not done (given up in a broker outage, or refused)
is done at faust's next commit: faust marks offsets committed whether or not they were
(preprocess_app/faust_patches.py: recommit_undone), and at a topic's end no later commit came to
cover them. Driven through faust's own consumer and commit path, the broker's answer played by
the test."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from typing import cast

import faust
import pytest
from faust.transport.drivers.aiokafka import Consumer
from faust.types import TP

from preprocess_app.faust_patches import ride_out_outages

RAW = TP("raw.text", 0)


class Broker:
    """Answers the consumer's commits in turn (True: done) and keeps what each one asked for."""

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.asked: list[dict[TP, int]] = []
        self.assigned = {RAW}

    async def commit(self, offsets: Mapping[TP, int]) -> bool:
        self.asked.append(dict(offsets))
        return self.answers.pop(0)


made: list[Consumer] = []


@pytest.fixture(autouse=True)
def closed_after() -> Iterator[None]:
    """faust's consumer makes its thread's event loop at once; never started, it is closed here."""
    yield
    while made:
        made.pop()._thread.thread_loop.close()


def consumer_of(broker: Broker) -> Consumer:
    ride_out_outages()
    app = faust.App("recommit", broker="kafka://127.0.0.1:1")  # never started: no broker is reached

    async def flushed() -> None:
        return None

    app.producer.flush = flushed  # type: ignore[method-assign]
    consumer = cast(Consumer, app.consumer)
    consumer.assignment = lambda: set(broker.assigned)  # type: ignore[method-assign]
    consumer._commit = broker.commit  # type: ignore[method-assign]
    made.append(consumer)
    return consumer


def ack(consumer: Consumer, offsets: Iterable[int]) -> None:
    """faust's bookkeeping of records acked (Consumer.ack, without the messages)."""
    for offset in offsets:
        consumer._acked[RAW].append(offset)
        consumer._acked_index[RAW].add(offset)


def test_the_last_offsets_of_a_topic_whose_commit_was_not_done_are_committed_next_time() -> None:
    async def run() -> list[bool]:
        consumer = consumer_of(broker)
        ack(consumer, range(10))
        return [await consumer.commit() for _ in range(3)]

    broker = Broker(False, True)
    assert asyncio.run(run()) == [False, True, False]  # the third: nothing left to commit
    assert broker.asked == [{RAW: 10}, {RAW: 10}]


def test_offsets_acked_after_a_commit_not_done_are_committed_with_it() -> None:
    async def run() -> list[bool]:
        consumer = consumer_of(broker)
        ack(consumer, range(10))
        first = await consumer.commit()
        ack(consumer, range(10, 15))
        return [first, await consumer.commit()]

    broker = Broker(False, True)
    assert asyncio.run(run()) == [False, True]
    assert broker.asked == [{RAW: 10}, {RAW: 15}]


def test_a_commit_not_done_after_its_partition_went_elsewhere_is_left_to_the_new_owner() -> None:
    async def run() -> list[bool]:
        consumer = consumer_of(broker)
        ack(consumer, range(10))

        async def then_revoked(offsets: Mapping[TP, int]) -> bool:
            broker.assigned = set()  # a rebalance while the commit waited
            return await broker.commit(offsets)

        consumer._commit = then_revoked  # type: ignore[method-assign]
        return [await consumer.commit(), await consumer.commit()]

    broker = Broker(False, True)
    assert asyncio.run(run()) == [False, False]
    assert broker.asked == [{RAW: 10}]
