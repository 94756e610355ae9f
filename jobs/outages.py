"""What a control-plane worker (the scheduler, the notifier) says of a Kafka outage it waits out:
one line when it starts, one a minute while it lasts, one when Kafka answers again."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


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
