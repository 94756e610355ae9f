"""Batches off a faust stream: faust's `noack_take`, with its tick armed only while records wait.

faust's take wakes every `within` seconds for the life of the worker, records or not: at the
20 ms linger, two agents (text, image) wake the event loop 100 times a second, 3% of a core while
idle, beside the engine on a one-host pipeline. Here an empty buffer waits for its first record
with no timeout, then for the next tick of the same `within`-second clock (or a full buffer), so a
record waits as long as under faust's tick (up to `within`, half of it on average) and an idle
worker sleeps. Acks stay with the caller, as with `noack_take`.

A batch is full at `max_` records, not events, when `weight` says how many records an event holds
(a pack's `records` header): the batch size means the same to a worker fed packs as to one fed
single records. An event is never split, so one pack larger than `max_` is a batch alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any


def _one(event: Any) -> int:
    return 1


async def tick_take(
    stream: Any, max_: int, within: float, weight: Callable[[Any], int] = _one
) -> AsyncIterator[list[Any]]:
    """Lists of events of `stream` holding up to `max_` records (`weight` of an event: 1 unless
    told), each handed over at the first tick of a `within`-second clock after its first event
    arrived, or as soon as it is full."""
    loop = asyncio.get_running_loop()
    buffer: list[Any] = []
    held = 0  # records in the buffer
    first = asyncio.Event()  # the buffer holds a record: the tick is armed
    full = asyncio.Event()
    consumed = asyncio.Event()
    consuming: asyncio.Future[None] | None = None  # set while the caller holds a batch

    async def add_to_buffer(value: Any) -> Any:
        nonlocal consuming, held
        try:
            if consuming is not None:  # a batch is being handed over: the next one starts after it
                try:
                    await consuming
                finally:
                    consuming = None
            event = stream.current_event
            if event is None:
                raise RuntimeError("take buffer found current_event is None")
            buffer.append(event)
            held += weight(event)
            first.set()
            if held >= max_:
                full.set()
                consumed.clear()
                await stream.wait(consumed)  # never more than max_ in one batch (or one event over it)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # as faust's take does: the stream crashes, the worker with it
            stream.log.exception("Error adding to take buffer: %r", exc)
            await stream.crash(exc)
        return value

    acks = stream.enable_acks
    stream.enable_acks = False  # the caller acks once a batch's outputs are sent
    stream.add_processor(add_to_buffer)
    stream._enable_passive(aiter(stream.channel))
    try:
        while not stream.should_stop:
            await stream.wait_for_stopped(first)
            if not full.is_set():
                await stream.wait_for_stopped(full, timeout=within - loop.time() % within)
            if not buffer:
                continue
            handed: asyncio.Future[None] = loop.create_future()
            consuming = handed
            try:
                yield list(buffer)
            finally:
                buffer.clear()
                held = 0
                first.clear()
                full.clear()
                handed.set_result(None)
                consumed.set()
    finally:
        stream.enable_acks = acks
        stream._processors.remove(add_to_buffer)
