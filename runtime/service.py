"""The one shape of every long-running worker (preprocess, GPU, scheduler, notifier): a context
manager that starts it (its clients, its state, an engine; closed on the way out, however it ends)
and `run(stop)`, which steps it until `stop` is set and waits out a Kafka outage between steps.
serve() runs one: the cluster probed (after the caller bound the worker's metrics endpoint, so a
scrape sees the worker while Kafka is down), SIGTERM and SIGINT set `stop` (after the current
step, committing what it took; never mid-step), a line when it runs and one when it stops. Its
lines on stderr begin with the time."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

R = TypeVar("R", covariant=True)


class Stop(threading.Event):
    """Set by SIGTERM or SIGINT. A loop checks it between steps; a loop that cannot (faust's, in
    the preprocess worker) asks to be called when it is set (`then`)."""

    def __init__(self) -> None:
        super().__init__()
        self._calls: list[Callable[[], None]] = []

    def then(self, call: Callable[[], None]) -> None:
        """Call `call` once this is set (at once if it is): from a signal handler, so it must only
        schedule, and may be called twice."""
        self._calls.append(call)
        if self.is_set():
            call()

    def set(self) -> None:
        super().set()
        for call in list(self._calls):
            call()


def stop_on_signals() -> Stop:
    """What SIGTERM or SIGINT sets. Called on the main thread (Python's signal handlers live there)."""
    stop = Stop()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    return stop


def say_stamped(line: str) -> None:
    """One line of a worker's log on stderr, after the time in UTC."""
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} {line}", file=sys.stderr, flush=True)


class Worker(Protocol[R]):
    def __enter__(self) -> Self: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def run(self, stop: Stop) -> R: ...


def serve(
    open_worker: Callable[[], Worker[R]],
    probe: Callable[[], None],
    running: Callable[[Any], str] | None = None,  # given the worker open_worker() made
    stopped: str | None = None,
    say: Callable[[str], None] = say_stamped,
) -> R:
    """Probe the cluster, then run the worker open_worker() makes until a signal stops it;
    running(worker) is said once it is open, `stopped` once it is closed."""
    probe()
    stop = stop_on_signals()
    with open_worker() as worker:
        if running is not None:
            say(running(worker))
        done = worker.run(stop)
    if stopped is not None:
        say(stopped)
    return done
