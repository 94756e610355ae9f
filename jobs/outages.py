"""How a control-plane worker (the scheduler, the notifier) waits out a Kafka outage: it steps
until told to stop, making its clients afresh after each failed step, and says one line when an
outage starts, one a minute while it lasts, one when Kafka answers again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kafka_io.errors import KAFKA_FAULTS


@dataclass
class OutageLog:
    name: str  # the worker, as its lines begin
    say: Callable[[str], None]
    retry_s: float
    down_since: float | None = None
    last_said: float = 0.0

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = self.last_said = now
            self.say(f"{self.name}: Kafka unavailable, retrying every {self.retry_s:g} s: {exc}")
        elif now - self.last_said >= 60:  # one line a minute, not one per retry
            self.last_said = now
            self.say(f"{self.name}: Kafka still unavailable after {now - self.down_since:.0f} s: {exc}")

    def answered(self, note: str = "") -> None:
        """After a step that reached Kafka: the outage, if there was one, is over."""
        if self.down_since is not None:
            self.say(f"{self.name}: Kafka answers again after {time.monotonic() - self.down_since:.0f} s{note}")
            self.down_since = None


def step_until_stopped(
    stop: threading.Event,
    step: Callable[[], object],
    drop_clients: Callable[[], None],
    outage: OutageLog,
    poll_s: float,
    note: Callable[[], str] = str,
) -> None:
    """step() every poll_s until `stop` is set. A step that meets a Kafka fault drops the clients
    (the next step makes them afresh) and is tried again every outage.retry_s, however long the
    outage lasts; note() is added to the line that says Kafka answers again."""
    while not stop.is_set():
        try:
            step()
        except KAFKA_FAULTS as exc:
            drop_clients()
            outage.failed(exc)
            stop.wait(outage.retry_s)
            continue
        outage.answered(note())
        stop.wait(poll_s)
