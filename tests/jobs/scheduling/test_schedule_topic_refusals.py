"""A schedule whose model's tensors topics Kafka will not create (a name colliding with an existing
topic's in '.' against '_') fails its tick with the reason: retrying would meet the same refusal."""

from __future__ import annotations

from pathlib import Path

from jobs.registry import JobStatus
from jobs.scheduling.cron import to_us
from jobs.scheduling.scheduler import Scheduler, SchedulerSettings
from jobs.scheduling.schedules import ScheduleSpec, add_schedule, new_schedule
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics, lanes
from kafka_io.topology import Topics
from tests.support.inputs import example_lines, write_jsonl
from tests.support.scheduling import T0, Clock, scheduled_jobs


def test_a_tick_whose_models_topics_collide_fails_with_the_reason(
    settings: KafkaSettings, topics: Topics, clock: Clock, tmp_path: Path
) -> None:
    ensure_topics(settings, lanes(topics, TopicSpec(topics.tensors("mini.lm"))))
    given = write_jsonl(tmp_path / "in.jsonl", example_lines(3))
    spec = ScheduleSpec("twin", "* * * * *", str(given), "mini_lm")
    add_schedule(settings, topics, new_schedule(spec, to_us(T0)))
    with Scheduler(settings, topics, SchedulerSettings("sched-a"), clock=clock) as scheduler:
        clock.at(1, 2)
        scheduler.step()
    failed = scheduled_jobs(settings, topics)["twin-20261129T1001Z"]
    assert JobStatus(failed).state == "failed"
    assert f"collides with the existing topic {topics.tensors('mini.lm')}" in (failed.error or "")
