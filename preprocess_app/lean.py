"""faust's message loop without four tasks per message.

faust's consumer hands each fetched message to its conductor as
`await self.wait_first(callback(message), self.suspend_flow.wait())`: four tasks (the callback,
the suspend event, the consumer's stopped and crashed events) and an asyncio.wait, so that a
callback blocked on a full stream buffer is abandoned when a rebalance suspends the flow. The
callback almost never blocks: it decodes the message and puts it in a queue with room. Those
tasks were the largest share of the preprocess worker's CPU per record (bench/faust_floor.py).

Here the callback is started at once, as a coroutine driven by hand: one that finishes without
waiting (the common case) costs no task; one that waits goes on in a task, under faust's own
wait_first, as before.

It pays with packs too (one event carries up to 128 texts): without it faust's own cost a text
is several times higher (`bench.faust_floor --pack 128` measures both; bench/HISTORY.md has the
figures).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import faust
from mode.services import WaitArgT, WaitResults


async def _go_on(coro: Coroutine[Any, Any, Any], waiting: Any) -> Any:
    """The rest of `coro`, which was driven by hand until it yielded `waiting` (a future, or None
    for a bare yield): awaited as the task running it would have, cancellation included."""
    while True:
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                # taken over from the coroutine's own await, as a task's step takes it over
                waiting._asyncio_future_blocking = False
                await waiting
            resume: BaseException | None = None
        except BaseException as exc:  # this task cancelled, or the future failed
            # a future that is done (failed or cancelled) raises inside coro once it is resumed,
            # as it would have under a task; anything else is thrown in
            resume = None if waiting is not None and waiting.done() else exc
        try:
            waiting = coro.send(None) if resume is None else coro.throw(resume)
        except StopIteration as done:
            return done.value


def eager_drain(base: type) -> type:
    """A subclass of faust consumer class `base` whose message loop starts each callback at once."""

    class EagerConsumer(base):
        async def wait_first(self, *coros: WaitArgT, timeout: float | None = None) -> WaitResults:
            first = coros[0] if coros else None
            # the message loop's call: a callback coroutine and the suspend event's wait()
            if timeout is None and len(coros) == 2 and asyncio.iscoroutine(first) and not self.should_stop:
                try:
                    waiting = first.send(None)
                except StopIteration as done:
                    second = coros[1]
                    if asyncio.iscoroutine(second):
                        second.close()  # never started
                    return WaitResults([first], [done.value], False)
                coros = (_go_on(first, waiting), coros[1])
            return await super().wait_first(*coros, timeout=timeout)

    return EagerConsumer


def drain_eagerly(app: faust.App) -> None:
    """Have `app`'s consumer start each message's callback at once (call before the worker starts;
    after preprocess_app.sole.take_every_partition, whose consumer class it extends)."""
    setattr(app.transport, "Consumer", eager_drain(app.transport.Consumer))  # noqa: B010
