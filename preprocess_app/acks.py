"""The preprocess worker's commit rule: a batch's events are acked, so that faust may commit past
them, only once the broker has confirmed every tensor record and dead letter the batch produced.

A batch opens (waiting while BATCHES_IN_FLIGHT are unconfirmed: faust's stream buffer then fills
and it stops fetching, which bounds memory), its outputs go to the producer with the batch's
`confirm` callback, and ConfirmedAcks acks its events when the producer calls back. A failed
delivery acks nothing and ends the worker (`fail`), so Kafka redelivers the batch to a healthy
worker. Unlike the GPU worker, which produces its unconfirmed windows again with a new producer
(gpu_consumer/pipeline.py), this worker leaves redelivery to Kafka: a batch is cheap to tokenize
again, where an engine's batch is the cost the product exists to spare, and a restarted worker
rejoins its group in seconds. Its producer is not idempotent (an idempotent one wedges after a
Tansu restart, docs/brokers.md); readers drop duplicates by key.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from kafka_io.deliveries import Confirm
from kafka_io.records import OutRecord

# Batches of one agent whose outputs are sent and not yet confirmed: enough to keep tokenizing
# while the producer lingers and the broker answers, few enough that their events stay few.
BATCHES_IN_FLIGHT = 8


@dataclass(frozen=True)
class OpenBatch:
    """A batch that holds a place: `confirm` is what the producer calls (on its own thread) once
    every output of the batch is stored (None) or one failed (the reason)."""

    confirmed: asyncio.Future[str | None]
    confirm: Confirm


class ConfirmedAcks:
    """Acks each batch's events once its outputs are confirmed; at most `limit` batches open."""

    def __init__(
        self,
        ack: Callable[[Any], Awaitable[None]],
        fail: Callable[[str], NoReturn],
        on_stored: Callable[[list[OutRecord]], None] = lambda out: None,
        limit: int = BATCHES_IN_FLIGHT,
    ) -> None:
        self._ack, self._fail, self._on_stored = ack, fail, on_stored
        self._room = asyncio.Semaphore(limit)
        self._acking: set[asyncio.Future[None]] = set()  # the loop keeps only a weak reference to a task

    async def open(self) -> OpenBatch:
        """A place for one more batch, once fewer than `limit` are unconfirmed."""
        await self._room.acquire()
        loop = asyncio.get_running_loop()
        confirmed: asyncio.Future[str | None] = loop.create_future()

        def confirm(failure: str | None) -> None:
            # on the producer's thread; a closed loop is a worker stopping, and what it did not
            # ack is redelivered
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(confirmed.set_result, failure)

        return OpenBatch(confirmed, confirm)

    def ack_when_stored(self, batch: OpenBatch, events: Sequence[Any], out: list[OutRecord]) -> None:
        """Ack `events` once `batch` is confirmed (its outputs `out`); until then faust commits
        nothing past them."""
        acking = asyncio.ensure_future(self._ack_when_stored(batch, events, out))
        self._acking.add(acking)
        acking.add_done_callback(self._acking.discard)

    async def _ack_when_stored(self, batch: OpenBatch, events: Sequence[Any], out: list[OutRecord]) -> None:
        failure = await batch.confirmed
        if failure is not None:
            self._fail(f"{failure}; exiting so the batch is redelivered")
        self._on_stored(out)
        for event in events:
            await self._ack(event)
        self._room.release()

    def unconfirmed(self) -> int:
        """Batches whose acks wait for the broker."""
        return len(self._acking)
