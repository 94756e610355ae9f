"""The preprocess worker's commit rule (preprocess_app/acks.py), without a broker: events are
acked only once the producer confirmed the batch's outputs, a failure acks nothing, and at most
`limit` batches wait for the broker."""

from __future__ import annotations

import asyncio
import threading
from typing import NoReturn

import pytest

from kafka_io.records import OutRecord
from preprocess_app.acks import ConfirmedAcks


class Failed(Exception):
    pass


def fail(reason: str) -> NoReturn:
    raise Failed(reason)


def outputs(n: int) -> list[OutRecord]:
    return [OutRecord("tensors.m", b"v", f"job/{i}".encode()) for i in range(n)]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_events_are_acked_only_once_the_producer_confirms_their_batch_from_its_own_thread() -> None:
    async def scenario() -> None:
        acked: list[str] = []
        stored: list[int] = []

        async def ack(event: str) -> None:
            acked.append(event)

        acks = ConfirmedAcks(ack, fail, lambda out: stored.append(len(out)))
        first, second = await acks.open(), await acks.open()
        acks.ack_when_stored(first, ["a1", "a2"], outputs(3))
        acks.ack_when_stored(second, ["b1"], outputs(1))
        await settle()
        assert acked == [] and stored == [] and acks.unconfirmed() == 2
        # delivery reports come on the producer's thread; the second batch's first
        threading.Thread(target=second.confirm, args=(None,)).start()
        await asyncio.wait_for(second.confirmed, 5)
        await settle()
        assert acked == ["b1"] and stored == [1] and acks.unconfirmed() == 1
        first.confirm(None)
        await asyncio.wait_for(first.confirmed, 5)
        await settle()
        assert acked == ["b1", "a1", "a2"] and stored == [1, 3] and acks.unconfirmed() == 0

    asyncio.run(scenario())


def test_a_failed_delivery_acks_nothing_of_its_batch_and_fails_the_worker_with_the_reason() -> None:
    async def scenario() -> None:
        acked: list[str] = []

        async def ack(event: str) -> None:
            acked.append(event)

        acks = ConfirmedAcks(ack, fail)
        batch = await acks.open()
        acks.ack_when_stored(batch, ["e1", "e2"], outputs(2))
        task = next(iter(acks._acking))  # the task that would ack: its failure is the worker's exit
        batch.confirm("delivery to tensors.m failed: Local: Message timed out")
        with pytest.raises(Failed, match=r"Message timed out; exiting so the batch is redelivered"):
            await asyncio.wait_for(task, 5)
        assert acked == []

    asyncio.run(scenario())


def test_a_batch_waits_for_room_while_limit_batches_are_unconfirmed() -> None:
    async def scenario() -> None:
        async def ack(event: str) -> None:
            return None

        acks = ConfirmedAcks(ack, fail, limit=2)
        open_batches = [await acks.open(), await acks.open()]
        for i, batch in enumerate(open_batches):
            acks.ack_when_stored(batch, [f"e{i}"], outputs(1))
        third = asyncio.ensure_future(acks.open())
        await settle()
        assert not third.done()  # faust's stream buffer fills meanwhile and it stops fetching
        open_batches[0].confirm(None)
        batch = await asyncio.wait_for(third, 5)
        assert not batch.confirmed.done()

    asyncio.run(scenario())


def test_a_confirmation_after_the_loop_closed_is_dropped_not_raised() -> None:
    """A worker stopping closes its loop while reports may still come: what it did not ack is
    redelivered, and the producer's thread must not die of it."""

    async def opened() -> ConfirmedAcks:
        return ConfirmedAcks(lambda event: asyncio.sleep(0), fail)

    loop = asyncio.new_event_loop()
    acks = loop.run_until_complete(opened())
    batch = loop.run_until_complete(acks.open())
    loop.close()
    batch.confirm(None)  # no RuntimeError out of the producer's callback
    assert not batch.confirmed.done()
