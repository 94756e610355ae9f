"""Schedules under an injected clock: the test day's T0, a clock tests move by hand, a schedule
added every minute, and the jobs schedulers submitted."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from jobs.registry import load_jobs
from jobs.scheduling.cron import to_us
from jobs.scheduling.scheduler import Scheduler, SchedulerSettings
from jobs.scheduling.schedules import ScheduleSpec, add_schedule, new_schedule
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from schemas import Job
from tests.support.waiting import wait_until

T0 = datetime(2026, 11, 29, 10, 0, 20, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def at(self, minutes: int, seconds: int = 0) -> None:
        """Move to 10:MM:SS on the test's day."""
        self.now = T0.replace(minute=minutes, second=seconds)


def scheduled_jobs(settings: KafkaSettings, topics: Topics) -> dict[str, Job]:
    return {k: j for k, j in load_jobs(settings, topics).items() if j.schedule is not None}


def add(settings: KafkaSettings, topics: Topics, text_input: Path, misfire: str = "skip", name: str = "hourly") -> None:
    add_schedule(
        settings,
        topics,
        new_schedule(ScheduleSpec(name, "* * * * *", str(text_input), "tiny", misfire=misfire), to_us(T0)),  # type: ignore[arg-type]
    )


@dataclass
class LoneScheduler:
    """A scheduler running in a thread on a broker of its own, which a trial takes down and starts
    again empty on the same port (the session's broker must stay up for the other tests)."""

    broker: EmbeddedBroker
    logs: Path
    events: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    runner: threading.Thread | None = None
    restarts: int = 0

    @property
    def settings(self) -> KafkaSettings:
        return KafkaSettings(self.broker.bootstrap_servers)

    @property
    def topics(self) -> Topics:
        return Topics("lone")

    def alive(self) -> bool:
        return self.runner is not None and self.runner.is_alive()

    def restart_broker(self) -> None:
        """A new, empty broker on the same port, as after a restart that lost everything."""
        self.restarts += 1
        self.broker = EmbeddedBroker.start(self.logs / f"broker{self.restarts + 1}.log", port=self.broker.port)

    def submits_the_next_tick(self, text_input: Path, clock: Clock, deadline: float) -> None:
        """Write the schedule again (the new broker holds nothing), move to the next tick, wait for
        its job before `deadline` (time.monotonic()), then stop the scheduler."""
        add(self.settings, self.topics, text_input)
        clock.at(1, 2)

        def alive() -> None:
            assert self.alive(), self.events

        wait_until(
            lambda: "hourly-20261129T1001Z" in scheduled_jobs(self.settings, self.topics),
            max(0.0, deadline - time.monotonic()),
            lambda: f"the next tick's job: {self.events}",
            every_s=1,
            meanwhile=alive,
        )
        self.stop.set()
        assert self.runner is not None
        self.runner.join(30)


@contextmanager
def lone_scheduler(logs: Path, clock: Clock) -> Iterator[LoneScheduler]:
    lone = LoneScheduler(EmbeddedBroker.start(logs / "broker.log"), logs)
    scheduler = Scheduler(
        lone.settings, lone.topics, SchedulerSettings("a", poll_s=0.2), clock=clock, on_event=lone.events.append
    )
    try:
        with scheduler:
            lone.runner = threading.Thread(target=scheduler.run, args=(lone.stop,))
            lone.runner.start()
            yield lone
    finally:
        lone.stop.set()
        lone.broker.stop()
