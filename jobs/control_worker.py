"""The shape of a control-plane worker (the scheduler, the notifier): a context manager that opens
its clients and reads its state, and `run(stop)`, which steps it until `stop` is set and waits
out a Kafka outage between steps (jobs/outages.py). serve() is what runs one: the cluster probed
(after the caller bound its metrics endpoint, so a scrape sees the worker even while Kafka is
down), SIGTERM and SIGINT stop it after its current step, a line when it runs and one when it
stops."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Protocol, Self, TypeVar

from kafka_io.clients import check_reachable
from kafka_io.settings import KafkaSettings
from runtime.service import stop_on_signals


class ControlWorker(Protocol):
    def __enter__(self) -> Self: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def run(self, stop: threading.Event) -> None: ...


W = TypeVar("W", bound=ControlWorker)


def serve(
    settings: KafkaSettings,
    open_worker: Callable[[], W],
    running: Callable[[W], str],
    stopped: str,
    say: Callable[[str], None],
) -> None:
    """Probe the cluster, then run the worker open_worker() makes until a signal stops it;
    running(worker) is said once it is open, `stopped` once it is closed."""
    check_reachable(settings)
    stop = stop_on_signals()
    with open_worker() as worker:
        say(running(worker))
        worker.run(stop)
    say(stopped)
