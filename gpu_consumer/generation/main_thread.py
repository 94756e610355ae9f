"""The GPU worker's main thread given to the generation engine: it builds the engine and steps it,
while the Kafka loop (poll, submit, emit, commit) runs on a thread of its own.

vLLM's CPU kernels run their parallel regions from the thread that steps the engine: stepped on the
thread that built it (the process's main thread) they kept both cores of the benchmark's host busy;
stepped on another they kept 1.7 (bench/HISTORY.md), and an engine built off the main thread aborted
in its compile warm-up. So a replacement engine (the loop's `renew`, after a failure) is built
here too, on the main thread, and driven here in its turn.

Where the engine computes on the CPU, a worker may give it CPUs of its own (`--engine-cpus`), as a
GPU's compute is its own: the main thread, and the threads it starts after (the engine's OpenMP
pool), stay on those; the Kafka loop, the post-process thread and the Kafka clients' threads (all
started from the loop's thread) on the others. Sharing every core instead, each wake-up of the
loop or the clients takes a core from one of the engine's threads while the other spins at its
barrier (bench/HISTORY.md).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol, TypeVar, runtime_checkable

from gpu_consumer.engines.generation_protocol import GenerationEngine

log = logging.getLogger(__name__)

T = TypeVar("T")


@runtime_checkable
class DrivenEngine(Protocol):
    """An engine stepped by its caller's thread: drive() returns once it is closed, it failed, or
    `until` is set."""

    def drive(self, until: threading.Event | None = None) -> None: ...


def engine_threads_on(cpus: frozenset[int]) -> None:
    """Keep this thread, and the threads it starts from now on, on `cpus`, and size torch's thread
    pool (the engine's OpenMP threads) to them. Call it before the engine is built."""
    import torch

    os.sched_setaffinity(0, cpus)  # 0: this thread, on Linux; threads inherit it as they start
    torch.set_num_threads(len(cpus))


def drive_on_main(
    engine: GenerationEngine,
    build: Callable[[], GenerationEngine],
    loop: Callable[[Callable[[], GenerationEngine]], T],
    loop_cpus: frozenset[int] | None = None,
) -> T:
    """Run `loop(renew)` on a thread of its own while this thread drives `engine`; `renew()`, called
    by the loop after an engine failure, builds another with `build` on this thread, which then
    drives that one. Returns what the loop returns, or raises what it raised. `loop_cpus`: the
    loop's thread, and every thread it starts, runs there."""
    builds: queue.Queue[Future[GenerationEngine] | None] = queue.Queue()
    done = threading.Event()
    outcome: Future[T] = Future()

    def renew() -> GenerationEngine:
        wanted: Future[GenerationEngine] = Future()
        builds.put(wanted)
        return wanted.result()

    def run_loop() -> None:
        try:
            if loop_cpus is not None:
                os.sched_setaffinity(0, loop_cpus)
            outcome.set_result(loop(renew))
        except BaseException as exc:  # raised again on the main thread, by the caller of drive_on_main
            outcome.set_exception(exc)
        finally:
            done.set()
            builds.put(None)  # wakes the main thread if it waits for a build

    thread = threading.Thread(target=run_loop, name="nearline-kafka-loop", daemon=True)
    thread.start()
    current: GenerationEngine | None = engine
    while not done.is_set():
        if isinstance(current, DrivenEngine):
            current.drive(until=done)  # returns at the end, or when the engine failed or was closed
        current = None
        wanted = builds.get()  # the loop replaces a failed engine, or ends
        if wanted is None:
            break
        try:
            current = build()
        except BaseException as exc:  # the loop's renew() raises it: the worker says the host is at fault
            wanted.set_exception(exc)
            continue
        wanted.set_result(current)
    thread.join()
    return outcome.result()
