"""Long broker outages (a minute, where tests/jobs/test_broker_restart.py restarts at once): what
runs for months waits them out and resumes, never exits."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from jobs.scheduling.scheduler import Scheduler, SchedulerConfig
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import KafkaSettings, Topics
from tests.jobs.test_pipeline import example_lines, write_jsonl
from tests.jobs.test_scheduler import T0, Clock, add, scheduled_jobs

OUTAGE_S = 60


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def text_input(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "daily.jsonl", example_lines(5))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_running_scheduler_waits_out_a_minute_without_a_broker_and_resumes(
    clock: Clock, text_input: Path, tmp_path: Path
) -> None:
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("outage")
    events: list[str] = []
    stop = threading.Event()
    scheduler = Scheduler(settings, topics, SchedulerConfig("a", poll_s=0.2), clock=clock, on_event=events.append)
    runner = threading.Thread(target=scheduler.run, args=(stop,))
    try:
        with scheduler:
            runner.start()
            broker.kill()  # connections refused for the whole minute
            down = time.monotonic()
            while time.monotonic() - down < OUTAGE_S:
                assert runner.is_alive(), events  # the old scheduler died here, ~20 s in
                time.sleep(1)
            broker = EmbeddedBroker.start(tmp_path / "broker2.log", port=broker.port)  # empty, as after any restart
            add(settings, topics, text_input)  # the schedule, written again to the new broker
            clock.at(1, 2)
            deadline = time.monotonic() + 60
            while "hourly-20261129T1001Z" not in scheduled_jobs(settings, topics):
                assert time.monotonic() < deadline and runner.is_alive(), events
                time.sleep(1)
            stop.set()
            runner.join(30)
    finally:
        stop.set()
        broker.kill()
    assert not runner.is_alive()
    assert any(e.startswith("scheduler: Kafka unavailable, retrying every 5 s") for e in events), events
    assert any(e.startswith("scheduler: Kafka answers again after") for e in events), events
