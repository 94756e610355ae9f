"""The one worker shape (runtime/service.py): serve() probes first, opens the worker, runs it
until SIGTERM or SIGINT sets its stop, closes it however run ends, and says when it runs and
stops; a loop that cannot poll the stop (faust's) is called when it is set."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Self

import pytest

from runtime.service import Stop, serve


@pytest.fixture(autouse=True)
def handlers_back() -> Iterator[None]:
    """serve() installs SIGTERM and SIGINT handlers: pytest's own come back after each test."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


class Signalled:
    """A worker whose run sends this process `sig` and waits for its stop."""

    def __init__(self, events: list[str], sig: int) -> None:
        self.events, self.sig = events, sig

    def __enter__(self) -> Self:
        self.events.append("opened")
        return self

    def __exit__(self, *exc: object) -> None:
        self.events.append("closed")

    def run(self, stop: Stop) -> int:
        os.kill(os.getpid(), self.sig)
        assert stop.wait(10)
        self.events.append("stopped by the signal")
        return 7


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_probes_opens_runs_until_a_signal_and_closes_saying_both_lines(sig: int) -> None:
    events: list[str] = []
    done = serve(
        lambda: Signalled(events, sig),
        lambda: events.append("probed"),
        lambda worker: f"running with {len(worker.events)} events",
        "stopped",
        events.append,
    )
    assert done == 7
    assert events == ["probed", "opened", "running with 2 events", "stopped by the signal", "closed", "stopped"]


def test_a_worker_whose_run_fails_is_closed_and_the_failure_raised() -> None:
    events: list[str] = []

    class Failing(Signalled):
        def run(self, stop: Stop) -> int:
            raise RuntimeError("engine gone")

    with pytest.raises(RuntimeError, match="engine gone"):
        serve(lambda: Failing(events, signal.SIGTERM), lambda: None, stopped="stopped", say=events.append)
    assert events == ["opened", "closed"]  # no "stopped" line: it did not stop, it failed


def test_a_probe_that_fails_opens_nothing() -> None:
    events: list[str] = []

    def down() -> None:
        raise ConnectionError("no broker at localhost:9092")

    with pytest.raises(ConnectionError):
        serve(lambda: Signalled(events, signal.SIGTERM), down)
    assert events == []


def test_a_stop_calls_what_asked_when_it_is_set_and_at_once_when_it_was() -> None:
    stop, calls = Stop(), []
    stop.then(lambda: calls.append("first"))
    assert calls == []
    setter = threading.Thread(target=stop.set)
    setter.start()
    setter.join()
    assert calls == ["first"] and stop.is_set()
    stop.then(lambda: calls.append("late"))
    assert calls == ["first", "late"]
