"""Jobs as durable objects: specs in the compacted `jobs` topic, progress derived from the stages' output.

The last value per job id wins and a tombstone deletes, read that way on every broker (Tansu
never compacts). Counts are distinct record ids in each stage's output topic, so they stay exact
across worker restarts and at-least-once redelivery.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from jobs.liveness import JobCancelledError, JobExpiredError
from jobs.printable import shown
from jobs.progress import Progress, format_eta
from kafka_io.reading import TopicFollower, read_topics
from kafka_io.records import ConsumedRecord, Headers, submission_of
from kafka_io.settings import KafkaSettings
from kafka_io.tables import put_row, read_records
from kafka_io.topics import jobs_topic
from kafka_io.topology import Lane, Topics
from results.outcome import JobFold, JobOutcome
from results.usage import Usage
from schemas import Job, SerdeError, decode, encode, now_us
from schemas.packs import kind_of, read_tensor_pack


class JobNotFoundError(LookupError):
    """No such job in the registry, or no records of it where a command looked (exit 1)."""


class JobState(StrEnum):
    SUBMITTED = "submitted"  # registered, no record preprocessed yet
    RUNNING = "running"
    COMPLETED = "completed"
    COMPLETED_WITH_ERRORS = "completed_with_errors"  # every record done, some dead-lettered
    CANCELLED = "cancelled"
    EXPIRED = "expired"  # its deadline (--complete-within) passed before every record was done
    FAILED = "failed"  # the job itself failed (e.g. a scheduled tick whose input was unreadable)

    @property
    def ended(self) -> bool:
        return self not in (JobState.SUBMITTED, JobState.RUNNING)


def register(settings: KafkaSettings, topics: Topics, job: Job) -> None:
    put_row(settings, jobs_topic(topics), job.job_id, encode(job))


def load_jobs(settings: KafkaSettings, topics: Topics) -> dict[str, Job]:
    return read_records(settings, jobs_topic(topics), Job)


def find_job(settings: KafkaSettings, topics: Topics, job_id: str) -> Job:
    try:
        return load_jobs(settings, topics)[job_id]
    except KeyError:
        raise JobNotFoundError(f"no job {job_id} in {topics.jobs}") from None


def _record_keys(msg: ConsumedRecord) -> Iterable[str]:
    """The `job/record` keys of the records a tensors Kafka record holds: a TensorPack's every
    record (schemas/packs.py), else its own key. A pack that cannot be read counts as the one
    key it is stored under, as a malformed single record does: the GPU worker dead-letters it."""
    if kind_of(msg.value) == "TensorPack":
        try:
            pack = read_tensor_pack(msg.value)
        except SerdeError:
            return (msg.key_text,)
        return (f"{pack.job_id}/{record_id}" for record_id in pack.record_ids)
    return (msg.key_text,)


@dataclass
class JobStatus:
    """Per-stage counts of one job, folded from the tensor, result and dead-letter topics."""

    job: Job
    keep_timings: bool = False  # counts need only record ids; the HTML report needs stage timestamps
    preprocessed: set[str] = field(default_factory=set)
    outcome: JobOutcome = field(init=False)

    def __post_init__(self) -> None:
        # A job id submitted again counts its latest submission only (the registry row's); a job
        # registered before submissions were told apart (no submission) counts every record.
        self.outcome = JobOutcome(
            self.job.job_id,
            submission=self.job.submission,
            keep_results=False,
            keep_timings=self.keep_timings,
            usage=Usage(),
        )

    def add(self, messages: Iterable[ConsumedRecord], topics: Topics) -> None:
        """Fold records in as they come: a whole topic read streams through, none is held."""
        tensors = job_tensors_topic(topics, self.job)
        for msg in messages:
            if msg.topic == tensors:
                if msg.job_id == self.job.job_id and self._of_submission(msg.headers):
                    self.preprocessed.update(_record_keys(msg))
            else:
                self.outcome.add((msg,), topics)

    def _of_submission(self, headers: Headers) -> bool:
        return self.job.submission is None or submission_of(headers) in (None, self.job.submission)

    @property
    def done(self) -> int:
        return self.outcome.done

    @property
    def state(self) -> JobState:
        if self.job.error is not None:
            return JobState.FAILED
        if self.job.cancelled_at is not None and self.done < self.job.total:
            return JobState.CANCELLED
        if self.done < self.job.total and self.job.past_deadline():
            return JobState.EXPIRED
        if self.done >= self.job.total:
            return JobState.COMPLETED_WITH_ERRORS if self.outcome.dead else JobState.COMPLETED
        return JobState.RUNNING if self.preprocessed or self.done else JobState.SUBMITTED

    def counts(self) -> dict[str, int]:
        # cancelled: records with no result or dead letter at the time of asking. Records already
        # in flight when the cancel came (polled, in a batch) still land, so it shrinks for a while.
        # expired: the same, for a job whose deadline passed (in-flight records may still land)
        state = self.state
        undone = self.job.total - self.done
        # reused: results written from the results cache (docs/reuse.md), never tokenized or
        # inferred; the preprocess stage looked them up, so they count as preprocessed
        job = self.job.job_id
        passed = (
            self.preprocessed | {f"{job}/{r}" for r in self.outcome.dead} | {f"{job}/{r}" for r in self.outcome.reused}
        )
        return {
            "submitted": self.job.total,
            "preprocessed": len(passed),
            "inferred": self.outcome.inferred - len(self.outcome.reused),
            "reused": len(self.outcome.reused),
            "dead_lettered": len(self.outcome.dead),
            "cancelled": undone if state is JobState.CANCELLED else 0,
            "expired": undone if state is JobState.EXPIRED else 0,
        }

    def time_left_s(self) -> float | None:
        """Seconds until the deadline (0 once passed), or None without one."""
        if self.job.deadline_at is None:
            return None
        return max(0.0, (self.job.deadline_at - now_us()) / 1e6)

    def deadline_news(self) -> float | None:
        """time_left_s() where people are shown the deadline (status, jobs list, report): while the
        job runs, and once it expired; None for a job without one, or one that ended otherwise."""
        state = self.state
        return None if state.ended and state is not JobState.EXPIRED else self.time_left_s()

    def to_dict(self, progress: Progress | None = None) -> dict[str, Any]:
        now = time.monotonic()
        rate = progress.rate(now) if progress is not None else None
        return {
            "job_id": self.job.job_id,
            "model": self.job.model,
            "input": self.job.input,
            "priority": self.job.priority,
            "schedule": self.job.schedule,
            "state": self.state.value,
            "error": self.job.error,
            # when the cancel was registered; counts.cancelled is as of now (see counts())
            "cancelled_at": _iso(self.job.cancelled_at),
            "labels": dict(self.job.terms.labels),
            "deadline": _iso(self.job.deadline_at),
            "complete_within_s": self.job.terms.complete_within_s,
            "time_left_s": self.time_left_s(),
            "notify": self.job.terms.notify,
            "reuse": self.job.terms.reuse,
            "counts": self.counts(),
            "usage": self.outcome.usage.to_dict(self.job.kind) if self.outcome.usage is not None else None,
            "records_per_s": rate,
            "eta_s": progress.eta(now) if progress is not None and self.done < self.job.total else None,
        }

    def line(self, progress: Progress | None = None) -> str:
        if self.job.error is not None:
            return f"{self.job.job_id} failed: {shown(self.job.error)}"
        c = self.counts()
        now = time.monotonic()
        return (
            f"{self.job.job_id} {self.state.value}{' (live lane)' if self.job.priority == 'live' else ''}: "
            f"{self.done}/{c['submitted']} done "
            f"(preprocessed {c['preprocessed']}, inferred {c['inferred']}"
            + (f", reused {c['reused']}" if c["reused"] else "")
            + f", dead-lettered {c['dead_lettered']}"
            + (f", cancelled {c['cancelled']} not done yet, fewer as in-flight results land" if c["cancelled"] else "")
            + (f", expired {c['expired']} not done by the deadline" if c["expired"] else "")
            + ")"
            + (f"  {progress.rate(now):.1f} rec/s  ETA {format_eta(progress.eta(now))}" if progress else "")
            + self._tokens_text()
            + self._deadline_text()
            + (f"  labels {format_labels(self.job.terms.labels)}" if self.job.terms.labels else "")
        )

    def _tokens_text(self) -> str:
        """A generation job's progress in tokens too: its completions' tokens so far."""
        tokens = self.outcome.usage.completion_tokens if self.outcome.usage is not None else 0
        return f"  {tokens:,} tokens generated" if tokens else ""

    def _deadline_text(self) -> str:
        left = self.deadline_news()
        if left is None:
            return ""
        when = _iso(self.job.deadline_at)
        return f"  deadline {when} ({format_eta(left)} left)" if left > 0 else f"  deadline {when} (passed)"


def format_labels(labels: Mapping[str, str]) -> str:
    """KEY=VALUE,KEY=VALUE in key order: how labels are shown and given (--label). A character that
    is not printable (a carriage return, an escape sequence: --label refuses them, a job registered
    otherwise may hold them) is shown escaped, so it cannot rewrite the line or the terminal."""

    return ",".join(f"{shown(key)}={shown(value)}" for key, value in sorted(labels.items()))


def _iso(us: int | None) -> str | None:
    return None if us is None else datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="seconds")


def job_tensors_topic(topics: Topics, job: Job) -> str:
    """The tensors topic of the job's lane: its records are preprocessed into that lane only."""
    return topics.lane(topics.tensors(job.model), job_lane(job))


def has_labels(job: Job, labels: Mapping[str, str]) -> bool:
    return all(job.terms.labels.get(key) == value for key, value in labels.items())


def job_lane(job: Job) -> Lane:
    return "live" if job.priority == "live" else "bulk"


def status_topics(topics: Topics, job: Job) -> list[str]:
    return [job_tensors_topic(topics, job), topics.results, topics.dead_letters]


def job_status(settings: KafkaSettings, topics: Topics, job_id: str, keep_timings: bool = False) -> JobStatus:
    status = JobStatus(find_job(settings, topics, job_id), keep_timings)
    status.add(read_topics(settings, status_topics(topics, status.job)), topics)
    return status


def job_statuses(settings: KafkaSettings, topics: Topics, labels: Mapping[str, str] | None = None) -> list[JobStatus]:
    """Every registered job's status (those with all of `labels`, if given), oldest first, folded
    by the same rule as job_status() in one read of the topics all of them need (each job's records
    are routed by their `job_id` header, or a dead letter's job/record key)."""
    wanted = labels or {}
    jobs = sorted(
        (job for job in load_jobs(settings, topics).values() if has_labels(job, wanted)),
        key=lambda j: j.submitted_at,
    )
    statuses = {job.job_id: JobStatus(job) for job in jobs}
    needed = sorted({t for status in statuses.values() for t in status_topics(topics, status.job)})
    if needed:
        for msg in read_topics(settings, needed):
            status = statuses.get(msg.job_id or msg.key_text.split("/")[0])
            if status is not None:
                status.add([msg], topics)
    return list(statuses.values())


def watch_status(
    settings: KafkaSettings, topics: Topics, job_id: str, every_s: float = 2.0, timeout_s: float | None = None
) -> Iterable[tuple[JobStatus, Progress | None]]:
    """(status, progress) every `every_s` until the job has ended; progress (rate and ETA) counts
    from the first report on, so it is None in that first one."""
    status = JobStatus(find_job(settings, topics, job_id))
    started, progress = time.monotonic(), None
    with TopicFollower(settings, status_topics(topics, status.job)) as follower:
        while True:
            deadline = time.monotonic() + every_s
            while time.monotonic() < deadline:
                status.add(follower.poll(0.2), topics)
            now = time.monotonic()
            if progress is not None:
                progress.done = status.done
            ended = status.state.ended and follower.caught_up()
            yield status, progress
            if ended:
                return
            if progress is None:
                progress = Progress(status.job.total, now, status.done, baseline=status.done)
            if timeout_s is not None and now - started > timeout_s:
                raise TimeoutError(f"job {job_id} still {status.state.value} after {timeout_s:.0f} s")


# Past a job's deadline, records already in flight (polled, in a batch) still land while the
# workers skip the rest; a wait follows them this much longer before it ends the job expired.
EXPIRY_DRAIN_S = 3.0


class CancelWatch:
    """A follow_job watchdog that stops a wait once the submission it follows is cancelled
    (JobCancelledError) or its completion window has passed (JobExpiredError, EXPIRY_DRAIN_S
    after the deadline). It follows the jobs topic itself, a poll that returns at once each tick,
    so a cancel is noticed within a poll or two of reaching the registry. A context manager: its
    reader is closed on leaving."""

    def __init__(self, settings: KafkaSettings, topics: Topics, job_id: str, submission: int | None) -> None:
        self._topics, self._job_id, self._submission = topics, job_id, submission
        self._follower = TopicFollower(settings, [topics.jobs])
        self._cancelled: Job | None = None
        self._deadline_at: int | None = None
        self._total = 0

    def __enter__(self) -> CancelWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._follower.close()

    def __call__(self, fold: JobFold) -> None:
        for record in self._follower.poll(0):
            if record.key_text != self._job_id or record.deleted:
                continue
            try:
                job = decode(record.value, Job)
            except SerdeError:
                continue
            # Only rows of this submission: a cancelled earlier submission of the same job id
            # (resubmitted since) says nothing about this one.
            if job.submission == self._submission:
                self._cancelled = job if job.cancelled_at is not None else None
                self._deadline_at, self._total = job.deadline_at, job.total
        if self._cancelled is not None and fold.done < self._cancelled.total:
            raise JobCancelledError(
                f"job {self._job_id} was cancelled (nearline cancel) with {fold.done} of {self._cancelled.total} "
                "records done; results of records already in flight may still land: nearline status "
                f"{self._job_id} counts them"
            )
        deadline = self._deadline_at
        if deadline is not None and fold.done < self._total and now_us() > deadline + EXPIRY_DRAIN_S * 1e6:
            raise JobExpiredError(
                f"job {self._job_id} expired at {_iso(self._deadline_at)} (its --complete-within window) with "
                f"{fold.done} records done; the rest were skipped"
            )


def cancel(settings: KafkaSettings, topics: Topics, job_id: str) -> Job:
    """Mark the job cancelled: workers skip its remaining records, which status counts as cancelled."""
    job = find_job(settings, topics, job_id)
    cancelled = replace(job, cancelled_at=now_us())
    register(settings, topics, cancelled)
    return cancelled
