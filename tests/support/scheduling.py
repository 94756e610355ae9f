"""Schedules under an injected clock: the test day's T0, a clock tests move by hand, a schedule
added every minute, and the jobs schedulers submitted."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from jobs.registry import load_jobs
from jobs.scheduling.cron import to_us
from jobs.scheduling.schedules import add_schedule, new_schedule
from kafka_io.settings import KafkaSettings, Topics
from schemas import Job

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
        new_schedule(name, "* * * * *", str(text_input), "tiny", misfire=misfire, at_us=to_us(T0)),  # type: ignore[arg-type]
    )
