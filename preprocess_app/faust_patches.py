"""Every place the preprocess worker reaches into faust's, mode's or aiokafka's internals, in one
module: faust stays the preprocess runtime (the design names it), and what it is made to do
differently is here, each patch with why. tests/preprocess_app/test_faust_patches.py fails if
an internal a patch stands on changes (faust-streaming is pinned in pyproject.toml).

- drain_eagerly: faust's message loop without four tasks per message.
- tick_take: batches off a stream with the tick armed only while records wait.
- take_every_partition: the worker as the one member of its group, with no group join.
- ride_out_outages: a worker in (or after) a broker outage still stops on SIGTERM, at once, and
  commits afterwards what the outage left uncommitted.
- stop_when: faust's worker stopped by the signals every worker shares (runtime/service.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any

import faust
from aiokafka import TopicPartition
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from mode.services import WaitArgT, WaitResults

from runtime.service import Stop

log = logging.getLogger(__name__)


# --- The message loop without four tasks per message (drain_eagerly) ---
#
# faust's message loop without four tasks per message.
#
# faust's consumer hands each fetched message to its conductor as
# `await self.wait_first(callback(message), self.suspend_flow.wait())`: four tasks (the callback,
# the suspend event, the consumer's stopped and crashed events) and an asyncio.wait, so that a
# callback blocked on a full stream buffer is abandoned when a rebalance suspends the flow. The
# callback almost never blocks: it decodes the message and puts it in a queue with room. Those
# tasks were the largest share of the preprocess worker's CPU per record (bench/faust_floor.py).
#
# Here the callback is started at once, as a coroutine driven by hand: one that finishes without
# waiting (the common case) costs no task; one that waits goes on in a task, under faust's own
# wait_first, as before.
#
# It pays with packs too (one event carries up to 128 texts): without it faust's own cost a text
# is several times higher (`bench.faust_floor --pack 128` measures both; bench/HISTORY.md has the
# figures).


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
    after take_every_partition, whose consumer class it extends)."""
    setattr(app.transport, "Consumer", eager_drain(app.transport.Consumer))  # noqa: B010


# --- Batches off a stream with the tick armed only while records wait (tick_take) ---
#
# Batches off a faust stream: faust's `noack_take`, with its tick armed only while records wait.
#
# faust's take wakes every `within` seconds for the life of the worker, records or not: at the
# 20 ms linger, two agents (text, image) wake the event loop 100 times a second, 3% of a core while
# idle, beside the engine on a one-host pipeline. Here an empty buffer waits for its first record
# with no timeout, then for the next tick of the same `within`-second clock (or a full buffer), so a
# record waits as long as under faust's tick (up to `within`, half of it on average) and an idle
# worker sleeps. Acks stay with the caller, as with `noack_take`.
#
# A batch is full at `max_` records, not events, when `weight` says how many records an event holds
# (a pack's `records` header): the batch size means the same to a worker fed packs as to one fed
# single records. An event is never split, so one pack larger than `max_` is a batch alone.


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


# --- The one member of its group: every partition, no join (take_every_partition) ---
#
# The preprocess worker as the one member of its group: every partition, no group join.
#
# For `nearline run`'s embedded pipeline only, as `nearline worker gpu --sole-consumer` is: on Tansu
# a faust join costs a second before the first record is read (the broker holds the JoinGroup
# for half the session timeout, and 1.0 s whether the session is 1 or 2 s), on the critical path of
# every run.
#
# Without a join, aiokafka commits with the "no generation" id, which Kafka and Tansu
# accept from a consumer outside the group, so offsets land in the same group and a worker that later
# joins it starts where this one stopped. Two sole consumers would both read everything.


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


# --- Through a broker outage (ride_out_outages) ---
#
# What faust and aiokafka need so that a preprocess worker in (or after) a broker outage still
# stops on SIGTERM, at once and with exit code 0, and commits afterwards what it could not in it.
#
# Commits: aiokafka retries a commit until the group coordinator answers: in an outage, for as long as it
# lasts. faust commits every few seconds, and its shutdown commits once more after waiting for the
# commit in progress, so a worker SIGTERMed in (or after) an outage hung until its SIGKILL. A
# commit that gets no answer within COMMIT_TIMEOUT_S is given up and reported as not done, and a
# worker that stops without those offsets has its records read again (at least once, as after any
# crash).
#
# A commit not done: faust takes the acked offsets off its list before it commits and marks them
# committed whether or not the commit was done (Consumer._commit_offsets), so a commit given up
# was never tried again. Where more records came, the next commit covered it; at a topic's end
# the group stayed short of it for good (an Apache Kafka trial: 10 offsets short after a restart,
# its lag shown for a finished job, the tail read again at the next start). The offsets of a
# commit not done go back on faust's list, so its next interval commits them.
#
# The fetcher: aiokafka's Fetcher.close() cancels its fetch requests and awaits them. A request
# that failed (no broker) sleeps its retry backoff, and cancelled there it raises CancelledError out
# of close(): the consumer's stop ends half done, faust's consumer thread dies with a traceback in
# the log, and faust waits 60 s for that thread to say it stopped. Cancelled while it waits for the
# broker, a request returns "no result" (aiokafka's own rule); the backoff sleep is made to say
# the same once the fetcher is closing.


# A commit takes milliseconds on a broker that answers; faust commits every 2.8 s.
COMMIT_TIMEOUT_S = 5.0


def ride_out_outages() -> None:
    """Apply the three patches (idempotent): call before the worker starts."""
    bound_commits()
    recommit_undone()
    close_fetcher_quietly()


def close_fetcher_quietly() -> None:
    """A fetch request cancelled by Fetcher.close() returns False wherever it waits."""
    from aiokafka.consumer.fetcher import Fetcher

    proc = Fetcher._proc_fetch_request
    if getattr(proc, "nearline_quiet", False):
        return

    async def quiet(self: Any, *args: Any) -> bool:
        try:
            done: bool = await proc(self, *args)
        except asyncio.CancelledError:
            if not self._closed:
                raise
            return False
        return done

    quiet.nearline_quiet = True  # type: ignore[attr-defined]
    setattr(Fetcher, "_proc_fetch_request", quiet)  # noqa: B010 (a method)


def bound_commits() -> None:
    """Make every faust consumer's commit give up after COMMIT_TIMEOUT_S (idempotent)."""
    commit = AIOKafkaConsumerThread._commit
    if getattr(commit, "nearline_bounded", False):
        return
    unanswered = [False]  # one line per run of unanswered commits, not one every interval

    async def bounded(self: Any, offsets: Mapping[Any, int]) -> bool:
        try:
            done: bool = await asyncio.wait_for(commit(self, offsets), COMMIT_TIMEOUT_S)
        except TimeoutError:
            if not unanswered[0]:
                unanswered[0] = True
                log.warning(
                    "offset commit unanswered for %.0f s; the offsets are kept and committed again later",
                    COMMIT_TIMEOUT_S,
                )
            return False
        unanswered[0] = False
        return done

    bounded.nearline_bounded = True  # type: ignore[attr-defined]
    setattr(AIOKafkaConsumerThread, "_commit", bounded)  # noqa: B010 (a method)


def recommit_undone() -> None:
    """The offsets of a commit not done stay owed: faust's next commit tries them again
    (idempotent). Not in a transaction: there a commit not done aborts what the records wrote, and
    the records are to be read again, not their offsets committed."""
    commit_offsets = AIOKafkaConsumer._commit_offsets
    if getattr(commit_offsets, "nearline_recommits", False):
        return

    async def owed(self: Any, offsets: Mapping[Any, int], start_new_transaction: bool = True) -> bool:
        before = {tp: self._committed_offset[tp] for tp in offsets}
        done: bool = await commit_offsets(self, offsets, start_new_transaction=start_new_transaction)
        if done or self.in_transaction:
            return done
        assigned = self.assignment()
        for tp, offset in offsets.items():
            # Untouched where faust did not mark it (no longer assigned, or revoked meanwhile).
            if tp in assigned and self._committed_offset[tp] == offset:
                self._committed_offset[tp] = before[tp]
                acked = range(offset - 1 if before[tp] is None else before[tp], offset)
                self._acked[tp].extend(acked)
                self._acked_index[tp].update(acked)
        return done

    owed.nearline_recommits = True  # type: ignore[attr-defined]
    setattr(AIOKafkaConsumer, "_commit_offsets", owed)  # noqa: B010 (a method)


# --- Stopped by the signals every worker shares (stop_when) ---
#
# mode's worker (faust's) installs SIGTERM and SIGINT handlers on its loop as it starts
# (Worker.install_signal_handlers), which would take both signals from serve()
# (runtime/service.py), whose `stop` the other workers' loops check. Here it installs none, and
# `stop` being set schedules the shutdown its own SIGTERM handler would (Worker._schedule_shutdown):
# the same stop, at once, with exit code 0.


def stop_when(runner: faust.Worker, stop: Stop) -> None:
    """Make `runner` stop once `stop` is set, in place of its own signal handlers."""

    def shut_down() -> None:  # called from a signal handler: it only schedules
        loop = runner.loop
        if loop.is_closed():  # faust stopped already
            return
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            loop.call_soon_threadsafe(runner._schedule_shutdown, signal.SIGTERM)

    setattr(runner, "install_signal_handlers", lambda: stop.then(shut_down))  # noqa: B010 (a method)
