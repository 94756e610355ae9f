"""Which job submissions are cancelled or expired, followed live from the jobs topic by the workers
that must skip them."""

from __future__ import annotations

import logging
import threading

from kafka_io.reading import TopicFollower
from kafka_io.records import ConsumedRecord, Headers, job_of, submission_of
from kafka_io.settings import KafkaSettings
from kafka_io.topics import ensure_topics, jobs_topic
from kafka_io.topology import Topics
from schemas import Job, SerdeError, decode, now_us

log = logging.getLogger(__name__)

CANCEL_FETCH_WAIT_MS = 500
# A jobs topic that does not exist yet (a worker started before the first submit) or a broker that
# does not answer is asked for again this often: a worker must not stop following for good.
FOLLOW_RETRY_S = 2.0


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
        # (job id, submission) -> when it expires, microseconds; (job id, None) for records without
        # a submission header, which follow the job's latest registry row
        self._deadlines: dict[tuple[str, int | None], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="cancellations", daemon=True)

    def start(self) -> Cancellations:
        """Follow the jobs topic in a background thread until close()."""
        self._thread.start()
        return self

    def skips(self, headers: Headers | None) -> bool:
        """Whether a record with these headers belongs to a cancelled submission, or to one whose
        deadline (--complete-within) has passed. A record without a `submission` header (written
        before submissions were told apart) follows the job's latest registry row, as it always did."""
        if not self._cancelled and not self._cancelled_submissions and not self._deadlines:
            return False  # the usual case, asked of every record: no header read
        job_id = job_of(headers)
        if job_id is None:
            return False
        return self.skips_submission(job_id, submission_of(headers))

    def skips_submission(self, job_id: str, submission: int | None) -> bool:
        """skips() for a record already decoded: the GPU worker asks again as a window it polled
        earlier reaches the engine, since a deadline may have passed while it waited its turn."""
        if not self._cancelled and not self._cancelled_submissions and not self._deadlines:
            return False
        if submission is None:
            if job_id in self._cancelled:
                return True
        elif submission in self._cancelled_submissions.get(job_id, ()):
            return True
        deadline = self._deadlines.get((job_id, submission))
        return deadline is not None and now_us() > deadline

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _follow(self) -> None:
        """Follow until close(); a follower that cannot start or fails is made again, from the
        topic's start (applying a registry row twice changes nothing)."""
        told = False
        while not self._stop.is_set():
            try:
                # Made here as the registry is made, not left to the metadata request of the
                # follower: a Kafka that auto-creates topics would make it uncompacted, with a 1 MB
                # record limit, and every later submit would refuse that topic.
                ensure_topics(self._settings, [jobs_topic(self._topics)])
                # A cancellation may take half a second to reach a worker; idle, this follower then
                # costs the broker two empty fetches a second instead of ten (every worker has one).
                with TopicFollower(self._settings, [self._topics.jobs], fetch_wait_ms=CANCEL_FETCH_WAIT_MS) as follower:
                    if told:
                        log.warning("following %s now: cancellations are seen again", self._topics.jobs)
                        told = False
                    while not self._stop.is_set():
                        for record in follower.poll(0.5):
                            self._apply(record)
            except Exception as exc:  # the registry is advisory for workers: never let it take one down
                if not told:
                    log.warning(
                        "cannot follow %s yet (%s); cancellations are not seen until it can, asking every %.0f s",
                        self._topics.jobs,
                        exc,
                        FOLLOW_RETRY_S,
                    )
                    told = True
                self._stop.wait(FOLLOW_RETRY_S)

    def _apply(self, record: ConsumedRecord) -> None:
        try:
            job = decode(record.value, Job)
        except SerdeError:
            return
        if job.deadline_at is not None:
            self._deadlines[(job.job_id, None)] = job.deadline_at
            if job.submission is not None:
                self._deadlines[(job.job_id, job.submission)] = job.deadline_at
        else:
            self._deadlines.pop((job.job_id, None), None)
        if job.cancelled_at is not None:
            self._cancelled.add(job.job_id)
            if job.submission is not None:
                self._cancelled_submissions.setdefault(job.job_id, set()).add(job.submission)
        else:
            self._cancelled.discard(job.job_id)
