"""drive_on_main: the engine built and stepped on the main thread, the loop on another; a
replacement built on the main thread and driven there in its turn; the loop's result or error
handed back to the caller."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest

from gpu_consumer.generation.main_thread import drive_on_main


class SteppedHere:
    """An engine whose drive() records the thread that steps it, until it is closed or told to end."""

    name = "stepped-here"

    def __init__(self) -> None:
        self.built_on = threading.current_thread()
        self.driven_on: list[threading.Thread] = []
        self.closed = threading.Event()

    def drive(self, until: threading.Event | None = None) -> None:
        self.driven_on.append(threading.current_thread())
        while not (self.closed.is_set() or (until is not None and until.is_set())):
            self.closed.wait(0.01)

    def close(self) -> None:
        self.closed.set()


def test_the_loop_runs_off_the_main_thread_while_the_main_thread_drives_the_engine() -> None:
    first = SteppedHere()
    loop_threads: list[threading.Thread] = []

    def loop(renew: Callable[[], SteppedHere]) -> str:
        loop_threads.append(threading.current_thread())
        while not first.driven_on:  # the main thread has started stepping it
            threading.Event().wait(0.01)
        return "served"

    assert drive_on_main(first, SteppedHere, loop) == "served"  # type: ignore[arg-type]
    assert first.driven_on == [threading.main_thread()]
    assert loop_threads and loop_threads[0] is not threading.main_thread()


def test_a_replacement_is_built_and_driven_on_the_main_thread() -> None:
    first = SteppedHere()
    replacements: list[SteppedHere] = []

    def loop(renew: Callable[[], SteppedHere]) -> int:
        first.close()  # as the step closes a failed engine before it asks for another
        second = renew()
        replacements.append(second)
        while not second.driven_on:
            threading.Event().wait(0.01)
        return 2

    assert drive_on_main(first, SteppedHere, loop) == 2  # type: ignore[arg-type]
    (second,) = replacements
    assert second.built_on is threading.main_thread()
    assert second.driven_on == [threading.main_thread()]


def test_the_loops_error_and_a_failed_build_reach_the_caller() -> None:
    def failing_build() -> SteppedHere:
        raise RuntimeError("no memory for another engine")

    def loop(renew: Callable[[], SteppedHere]) -> None:
        renew()

    first = SteppedHere()
    first.close()
    with pytest.raises(RuntimeError, match="no memory for another engine"):
        drive_on_main(first, failing_build, loop)  # type: ignore[arg-type]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to split")
def test_the_loop_and_the_threads_it_starts_run_on_the_cpus_left_to_the_host() -> None:
    host = frozenset({max(os.sched_getaffinity(0))})
    main_before = os.sched_getaffinity(0)
    seen: dict[str, set[int]] = {}

    def loop(renew: Callable[[], SteppedHere]) -> None:
        seen["loop"] = os.sched_getaffinity(0)
        started = threading.Thread(target=lambda: seen.__setitem__("started", os.sched_getaffinity(0)))
        started.start()  # as the emit thread and the Kafka clients' threads are
        started.join()

    drive_on_main(SteppedHere(), SteppedHere, loop, loop_cpus=host)  # type: ignore[arg-type]
    assert seen == {"loop": host, "started": host}
    assert os.sched_getaffinity(0) == main_before  # the engine's thread keeps its own


@pytest.mark.process
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to split")
def test_the_engines_cpus_hold_the_main_thread_the_threads_it_starts_and_size_torchs_pool() -> None:
    engine = min(os.sched_getaffinity(0))
    script = f"""
import os, threading, torch
from gpu_consumer.generation.main_thread import engine_threads_on
engine_threads_on(frozenset({{{engine}}}))
later = []
thread = threading.Thread(target=lambda: later.append(os.sched_getaffinity(0)))
thread.start(); thread.join()
print(sorted(os.sched_getaffinity(0)), sorted(later[0]), torch.get_num_threads())
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == f"[{engine}] [{engine}] 1"
