"""A job's webhook notification as `nearline status` shows it, looked up by the job's id."""

from __future__ import annotations

from typing import Any

from jobs.notifications.status import notification_for
from jobs.registry import load_jobs
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics


def notification_of(settings: KafkaSettings, topics: Topics, job_id: str) -> dict[str, Any] | None:
    """notification_for() the job registered as `job_id`; None when there is none, or it has no URL."""
    job = load_jobs(settings, topics).get(job_id)
    return None if job is None else notification_for(settings, topics, job)
