"""Which jobs are cancelled, followed live from the jobs topic by the workers that must skip them."""

from __future__ import annotations

import logging
import threading
from typing import Any

from kafka_io import Message
from kafka_io.reading import TopicFollower
from kafka_io.settings import KafkaSettings, Topics
from schemas import Job, SerdeError, decode

log = logging.getLogger(__name__)


def job_of(headers: Any) -> str | None:
    """The job id a record carries in its `job_id` header (every stage's output has one).
    `headers` as either client gives them: a list of pairs or a mapping."""
    if isinstance(headers, dict):
        value = headers.get("job_id")
    else:  # a list: scanned, not made a dict, as this runs for every consumed record
        value = next((v for k, v in headers or () if k == "job_id"), None)
    return value.decode() if isinstance(value, bytes) else None


class Cancellations:
    """A background follower of the jobs topic; `is_cancelled` is a set lookup on the hot path."""

    def __init__(self, settings: KafkaSettings, topics: Topics) -> None:
        self._settings, self._topics = settings, topics
        self._cancelled: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="cancellations", daemon=True)
        self._thread.start()

    def is_cancelled(self, job_id: str | None) -> bool:
        return job_id is not None and job_id in self._cancelled

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _follow(self) -> None:
        try:
            with TopicFollower(self._settings, [self._topics.jobs]) as follower:
                while not self._stop.is_set():
                    for msg in follower.poll(0.5):
                        self._apply(msg)
        except Exception:  # the registry is advisory for workers: never let it take one down
            log.exception("following %s failed; cancellations will not be seen", self._topics.jobs)

    def _apply(self, msg: Message) -> None:
        try:
            job = decode(msg.value() or b"", Job)
        except SerdeError:
            return
        if job.cancelled_at is not None:
            self._cancelled.add(job.job_id)
        else:
            self._cancelled.discard(job.job_id)
