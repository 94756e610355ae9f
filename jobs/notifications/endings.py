"""Which of the jobs a notifier waits on have ended, followed incrementally.

A job ends by its registry row alone (failed; cancelled; its deadline passed), or once a result or
dead letter has come for each of its records. For the latter, each job's JobStatus is fed from
the results and dead-letter topics as they are written, by one follower from the topics'
beginning; a job first followed after that follower had started gets a catch-up follower of its
own, from the beginning, closed at the end. A record read twice counts once (JobStatus counts
distinct record ids), and a count can only lag, never run ahead: a job is never taken to have
ended before it has.
"""

from __future__ import annotations

import logging
import time

from jobs.notifications.claims import submission_of
from jobs.registry import JobStatus
from kafka_io.reading import TopicFollower
from kafka_io.records import ConsumedRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import partitions_of
from kafka_io.topology import Topics
from schemas import Job

log = logging.getLogger(__name__)

# The follower of a namespace that lacked the results or dead-letter topic when it started (a job
# registered without a submit, which creates both) asks this often whether it exists now.
MISSING_TOPIC_RECHECK_S = 2.0


def job_of_record(msg: ConsumedRecord) -> str:
    """The job a result (`job_id` header) or dead letter (key `job/record`) belongs to."""
    return msg.job_id or msg.key_text.split("/", 1)[0]


class Endings:
    """The statuses of the followed jobs, one submission per job id (its latest registry row's)."""

    def __init__(self, settings: KafkaSettings, topics: Topics) -> None:
        self._settings, self._topics = settings, topics
        self._statuses: dict[str, JobStatus] = {}
        self._new: set[str] = set()  # followed since the last poll: no follower has fed them yet
        self._live: TopicFollower | None = None
        self._missing: set[str] = set()  # outcome topics that did not exist when the live follower started
        self._checked = 0.0
        self._catch_ups: list[tuple[TopicFollower, set[str]]] = []

    def follow(self, job: Job) -> JobStatus:
        """The job's status as folded so far; from the first call on, it is fed at each poll()."""
        status = self._statuses.get(job.job_id)
        if status is not None and submission_of(status.job) == submission_of(job):
            status.job = job  # a later row of the same submission: cancelled, say
            return status
        status = self._statuses[job.job_id] = JobStatus(job)
        if not status.state.ended:  # ended by its row alone: nothing to count
            self._new.add(job.job_id)
        return status

    def forget(self, job_id: str) -> None:
        self._statuses.pop(job_id, None)
        self._new.discard(job_id)
        for _, wanted in self._catch_ups:
            wanted.discard(job_id)

    def poll(self, budget_s: float = 0.2) -> None:
        """Feed the followed jobs what was written since the last poll (about `budget_s` a follower)."""
        self._start_followers()
        if self._live is not None:
            self._feed(self._live, None, budget_s)
        for follower, wanted in list(self._catch_ups):
            self._feed(follower, wanted, budget_s)
            if follower.caught_up() or not wanted:
                follower.close()
                self._catch_ups.remove((follower, wanted))

    def _start_followers(self) -> None:
        outcome_topics = [self._topics.results, self._topics.dead_letters]
        if self._live is not None and self._missing and time.monotonic() - self._checked > MISSING_TOPIC_RECHECK_S:
            self._checked = time.monotonic()
            if any(partitions_of(self._settings, topic) for topic in self._missing):
                self._live.close()  # and again from the beginning, with the topic that came
                self._live = None
                self._new |= set(self._statuses)
        if not self._new:
            return
        follower = TopicFollower(self._settings, outcome_topics, missing_ok=True)
        if self._live is None:  # from the beginning: it covers every job followed so far
            self._live, self._checked = follower, time.monotonic()
            self._missing = set(outcome_topics) - {topic for topic, _ in follower.partitions}
        else:
            self._catch_ups.append((follower, set(self._new)))
        self._new.clear()

    def _feed(self, follower: TopicFollower, wanted: set[str] | None, budget_s: float) -> None:
        deadline = time.monotonic() + budget_s
        while True:
            batch = follower.poll(0.02)
            for msg in batch:
                job_id = job_of_record(msg)
                status = self._statuses.get(job_id)
                if status is not None and (wanted is None or job_id in wanted):
                    try:
                        status.add((msg,), self._topics)
                    except Exception:  # a record no stage writes: never a reason to stop notifying
                        log.exception("ignoring %s at offset %s, which cannot be counted", msg.topic, msg.offset)
            if not batch or time.monotonic() > deadline:
                return

    def close(self) -> None:
        """Close the followers; a later poll() starts afresh and counts every followed job again."""
        for follower in [*([self._live] if self._live is not None else []), *(f for f, _ in self._catch_ups)]:
            follower.close()
        self._live, self._catch_ups = None, []
        self._new = {job_id for job_id, status in self._statuses.items() if not status.state.ended}
