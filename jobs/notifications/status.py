"""What `nearline status` shows of a job's webhook notification: read from the notifications log,
by the same rules the notifiers fold it with (claims.py). Reading creates no topic."""

from __future__ import annotations

from typing import Any

from jobs.notifications.claims import NotificationLog, NotificationState, key_of, pending
from jobs.notifications.delivery import shown_url
from jobs.printable import shown
from kafka_io.reading import read_topics
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from schemas import Job, Notification, SerdeError, decode


def load_notifications(settings: KafkaSettings, topics: Topics) -> NotificationLog:
    """The whole log, folded; a record that is not a Notification is passed over."""
    folded = NotificationLog()
    for msg in read_topics(settings, [topics.notifications]):
        if msg.deleted:
            continue
        try:
            folded.add(decode(msg.value, Notification))
        except SerdeError:
            continue
    return folded


def notification_for(settings: KafkaSettings, topics: Topics, job: Job) -> dict[str, Any] | None:
    """The notification of the job's submission, or None when the job has no --notify URL:
    {"state": pending|failing|delivered|gave_up, "url", "idempotency_key", "attempts",
    "last_error", "http_status", "last_attempt_at", "delivered_at", "gave_up_at" (ISO 8601, UTC,
    or None), "worker" (the notifier that owns it, or None)}. pending: not attempted yet (the job
    has not ended, or no notifier has run since); failing: attempted, not delivered yet."""
    if not job.terms.notify:
        return None
    state = load_notifications(settings, topics).get(key_of(job)) or pending(job)
    return _document(state)


def notifications_for(settings: KafkaSettings, topics: Topics, jobs: list[Job]) -> dict[str, dict[str, Any] | None]:
    """notification_for() each of `jobs` by id, from one read of the log (`jobs list --json`)."""
    folded = load_notifications(settings, topics) if any(job.terms.notify for job in jobs) else NotificationLog()
    return {
        job.job_id: _document(folded.get(key_of(job)) or pending(job)) if job.terms.notify else None for job in jobs
    }


def _document(state: NotificationState) -> dict[str, Any]:
    """The state's document, its texts with control characters escaped: a receiver's answer and a
    submitter's URL are shown on other people's terminals, the URL without its secrets (shown_url)."""
    document = state.to_dict()
    document["url"] = shown_url(document["url"])
    if document["last_error"] is not None:
        document["last_error"] = shown(document["last_error"])
    return document
