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


def _header(headers: Any, name: str) -> bytes | None:
    # a list is scanned, not made a dict, as this runs for every consumed record
    value = headers.get(name) if isinstance(headers, dict) else next((v for k, v in headers or () if k == name), None)
    return value if isinstance(value, bytes) else None


def job_of(headers: Any) -> str | None:
    """The job id a record carries in its `job_id` header (every stage's output has one).
    `headers` as either client gives them: a list of pairs or a mapping."""
    value = _header(headers, "job_id")
    return value.decode() if value is not None else None


def submission_of(headers: Any) -> int | None:
    """The submission (its `submitted_at`) a record carries in its `submission` header; None for
    records written before submissions were told apart, or with a malformed header."""
    value = _header(headers, "submission")
    return int(value) if value is not None and value.isdigit() else None


class Cancellations:
    """A background follower of the jobs topic; `skips` is two dict lookups on the hot path.

    A cancellation is per submission: cancelling a job cancels the submission its registry row
    names (`submission`), and a job id submitted again is a new submission that runs. Once
    cancelled, a submission stays cancelled here even when the job id is registered again, so
    the cancelled submission's records still in the topics stay skipped."""

    def __init__(self, settings: KafkaSettings, topics: Topics) -> None:
        self._settings, self._topics = settings, topics
        self._cancelled: set[str] = set()  # jobs whose latest registry row is cancelled
        self._cancelled_submissions: dict[str, set[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="cancellations", daemon=True)
        self._thread.start()

    def is_cancelled(self, job_id: str | None) -> bool:
        """Whether the job's latest submission is cancelled."""
        return job_id is not None and job_id in self._cancelled

    def skips(self, headers: Any) -> bool:
        """Whether a record with these headers belongs to a cancelled submission. A record without
        a `submission` header (written before submissions were told apart) follows the job's
        latest registry row, as it always did."""
        job_id = job_of(headers)
        if job_id is None:
            return False
        submission = submission_of(headers)
        if submission is None:
            return job_id in self._cancelled
        return submission in self._cancelled_submissions.get(job_id, ())

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
            if job.submission is not None:
                self._cancelled_submissions.setdefault(job.job_id, set()).add(job.submission)
        else:
            self._cancelled.discard(job.job_id)
