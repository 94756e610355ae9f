"""The notifier process (`nearline worker notifier`): one POST of a job's status document to its
--notify URL once the job has ended, delivered once however many notifiers run.

Each notifier follows the `jobs` topic (rows with a URL) and the `notifications` log (one
partition; claims.py has its rules). When a followed job has ended (endings.py), a notifier
appends a claim for its submission's notification and acts only once it has read its own claim
back as the winner: every record before it has been read then, a delivery included. The owner
POSTs (delivery.py), records each failed attempt and retries on the log's schedule, writes a
renewal while it waits or POSTs, and records the delivery or its giving up. A claim whose owner has
written nothing for longer than its lease is taken over by the next claim, which continues the
retry schedule from the log. A notifier restarted with the same --instance-id claims its own
notifications again at once. Nothing is kept on local disk: the submitting process may be long gone.

A POST holds one of `concurrency` slots for at most the timeout, and one receiver (scheme, host,
port) has one POST in flight at a time, so slow receivers hold up only their own notifications.
A notification that is due while no slot is free is not renewed: a notifier that cannot serve a
claim lets its lease run out, so another may take it over; before it POSTs, a notifier whose own
lease ran out claims again rather than POST under a claim another may have taken.

Two POSTs of one notification happen only when an owner dies (or is cut off for longer than its
lease) between its POST and the record of it; both carry the same Idempotency-Key.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from jobs.notifications.claims import (
    ATTEMPT,
    CLAIM,
    DELIVERED,
    GAVE_UP,
    RENEW,
    NotificationLog,
    NotificationState,
    kafka_key,
    key_of,
    notification_key,
    submission_of,
)
from jobs.notifications.delivery import Answer, DeliverySettings, RetrySettings, post, redacted
from jobs.notifications.endings import Endings
from jobs.notifications.metrics import NotifierMetrics
from jobs.notifications.posts import Attempt, InFlight, receiver_of
from jobs.notifications.signing import SigningKeys
from jobs.notifications.targets import TargetSettings
from jobs.outages import OutageLog, step_until_stopped
from jobs.registry import EXPIRY_DRAIN_S, JobNotFoundError, JobState, job_status
from kafka_io.clients import Producer, make_producer
from kafka_io.errors import KAFKA_FAULTS
from kafka_io.produce import produce_all
from kafka_io.reading import TopicFollower
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import ensure_topics, jobs_topic, notifications_topic
from kafka_io.topology import Topics
from schemas import Job, Notification, SerdeError, decode, encode, now_us

log = logging.getLogger(__name__)

# A claim not read back within this long is taken as lost (the broker may have dropped it):
# the notification may be claimed again.
CLAIM_READ_BACK_S = 60.0
READ_TO_END_S = 15.0  # a step that cannot read the jobs and notifications to their end is a Kafka fault


@dataclass(frozen=True)
class NotifierSettings:
    instance_id: str
    retry: RetrySettings = field(default_factory=RetrySettings)
    timeout_s: float = 10.0  # for one POST, all told: resolving, connecting, sending, the answer's head
    lease_s: float = 60.0  # silent this long, an owner's notifications may be taken over
    # A cancelled or expired job is told of this long after its cancel or deadline: its records
    # already in flight land first, as `submit --wait` lets them (jobs/registry.py).
    settle_s: float = EXPIRY_DRAIN_S
    poll_s: float = 0.5
    concurrency: int = 4  # POSTs at once, one per receiver: a receiver that hangs holds up one of them only
    targets: TargetSettings = field(default_factory=TargetSettings)  # by default: public addresses only
    signing: SigningKeys = field(default_factory=SigningKeys)

    @property
    def delivery(self) -> DeliverySettings:
        return DeliverySettings(self.timeout_s, self.targets, self.signing)

    def __post_init__(self) -> None:
        if self.lease_s <= 0 or self.timeout_s <= 0 or self.poll_s <= 0 or self.concurrency < 1:
            raise ValueError("the lease, the timeout and the poll interval must be over 0 s, the concurrency 1 or more")


class Notifier:
    def __init__(
        self,
        settings: KafkaSettings,
        topics: Topics,
        config: NotifierSettings,
        on_event: Callable[[str], None] = log.info,
        metrics: NotifierMetrics | None = None,
    ) -> None:
        self.settings = settings.with_client_id(f"notifier-{config.instance_id}")
        self.metrics = metrics or NotifierMetrics()
        self.topics, self.config, self.on_event = topics, config, on_event
        self.jobs: dict[str, Job] = {}  # registry rows with a URL: the latest per job id
        self.log = NotificationLog()
        self.endings = Endings(self.settings, topics)
        self.ready = False  # read both topics to their end once since (re)opening: may claim
        self._follower: TopicFollower | None = None
        self._producer: Producer | None = None
        self._mine: set[str] = set()  # the claims this process appended
        self._awaiting: dict[str, tuple[str, float]] = {}  # key -> (claim id, when), not read back yet
        self._last_write: dict[str, float] = {}  # key -> when this process last wrote of it
        self._outbox: list[Notification] = []  # written, not yet confirmed by the broker
        self._in_flight: dict[str, InFlight] = {}  # key -> its POST
        self._bodies: dict[str, tuple[bytes, str]] = {}  # key -> (document, job state): the same on every retry
        self._broken: set[str] = set()  # jobs whose notification failed unexpectedly, logged once
        self._pool = ThreadPoolExecutor(config.concurrency, thread_name_prefix="notify")

    def __enter__(self) -> Notifier:
        self._open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> None:
        ensure_topics(self.settings, [jobs_topic(self.topics), notifications_topic(self.topics)])
        self._follower = TopicFollower(self.settings, [self.topics.jobs, self.topics.notifications])
        self._producer = make_producer(self.settings)
        self.jobs, self.log, self.ready, self._awaiting = {}, NotificationLog(), False, {}
        self._read(self._follower.poll_to_end())
        for record in self._outbox:  # done before an outage, not in the log yet: still done
            if record.kind != CLAIM:
                self.log.add(record)

    def _drop_clients(self) -> None:
        """Forget the clients and what they read: after a broker restart the old ones can be wedged,
        and what was read may be gone. The next step opens afresh; what this process did and has
        not recorded yet (the outbox, the POSTs in flight) is kept."""
        if self._follower is not None:
            self._follower.close()
            self._follower = None
        self.endings.close()
        self._producer = None

    def close(self, wait_s: float | None = None) -> None:
        """Record the POSTs in flight (waiting up to the POST timeout), then let go of the clients."""
        deadline = time.monotonic() + (self.config.timeout_s + 1 if wait_s is None else wait_s)
        while self._in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
            self._collect()
        if self._producer is not None:
            try:
                self._collect()
                self._flush()
            except KAFKA_FAULTS as exc:
                self.on_event(f"notifier: {len(self._outbox)} record(s) of what was done could not be written: {exc}")
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._drop_clients()

    def step(self) -> None:
        """Read what is new, claim what has ended, POST what this notifier owns, write it all down."""
        assert self._follower is not None, "use the notifier as a context manager"
        self._flush()  # what an outage kept back, before anything new
        self._collect()
        # Asking where the topics end, as the scheduler does each step, is what finds a broker gone
        # or restarted empty (its topics unknown): a follower's poll alone would wait there silently.
        self._read(self._follower.poll_to_end(READ_TO_END_S))
        self._read(self._drain(self._follower))
        self.endings.poll()
        now = now_us()
        # Longest due first: when a slot or a receiver frees, the notification waiting the longest
        # takes it, so notifications to one slow receiver take turns rather than two starving a third.
        for job in sorted(self.jobs.values(), key=self._due_at):
            try:
                self._consider(job, now)
            except Exception:  # a bug met on one job's rows: the others go on (nothing here talks to Kafka)
                if job.job_id not in self._broken:
                    self._broken.add(job.job_id)
                    log.exception("notification of job %s: skipped, it fails unexpectedly", job.job_id)
        self._flush()

    def _due_at(self, job: Job) -> int:
        state = self.log.get(key_of(job))
        return 0 if state is None else self.config.retry.next_attempt_at(state)

    def _consider(self, job: Job, now: int) -> None:
        key = key_of(job)
        state = self.log.get(key)
        if state is not None and state.final:
            self.endings.forget(job.job_id)
            self._bodies.pop(key, None)
            self._last_write.pop(key, None)
        elif state is not None and state.claim_id in self._mine:
            self._serve(job, state, now)
        elif self._may_claim(key, state, now) and self._ended(job, now):
            self._claim(job)

    def _may_claim(self, key: str, state: NotificationState | None, now: int) -> bool:
        """Read both topics to their end (no claim on what was delivered before this started), no
        claim of this notifier's in the air, and nobody owns it, or its owner went silent."""
        return self.ready and key not in self._awaiting and (state is None or state.claimable(now))

    def _drain(self, follower: TopicFollower, budget_s: float = 0.5) -> list[ConsumedRecord]:
        out: list[ConsumedRecord] = []
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            batch = follower.poll(0.05)
            out += batch
            if not batch:
                break
        self.ready = self.ready or follower.caught_up()
        return out

    def _read(self, messages: list[ConsumedRecord]) -> None:
        for msg in messages:
            try:
                if msg.topic == self.topics.jobs:
                    self._registry_row(msg)
                elif not msg.deleted:
                    record = decode(msg.value, Notification)
                    self.log.add(record)
                    key = notification_key(record.job_id, record.submission)
                    if self._awaiting.get(key, ("", 0.0))[0] == record.claim_id:
                        del self._awaiting[key]
            except SerdeError as exc:
                log.warning("ignoring an unreadable record in %s at offset %s: %s", msg.topic, msg.offset, exc)
        lost = [k for k, (_, at) in self._awaiting.items() if time.monotonic() - at > CLAIM_READ_BACK_S]
        for key in lost:
            del self._awaiting[key]

    def _registry_row(self, msg: ConsumedRecord) -> None:
        job = None if msg.deleted else decode(msg.value, Job)
        if job is None or not job.terms.notify:
            self.jobs.pop(msg.key_text, None)
            self.endings.forget(msg.key_text)
        else:
            self.jobs[job.job_id] = job

    def _ended(self, job: Job, now: int) -> bool:
        """Whether the job has ended, and settled: a cancelled or expired one settle_s after."""
        state = self.endings.follow(job).state
        settle_us = round(self.config.settle_s * 1e6)
        if state is JobState.CANCELLED and job.cancelled_at is not None:
            return now >= job.cancelled_at + settle_us
        if state is JobState.EXPIRED and job.deadline_at is not None:
            return now >= job.deadline_at + settle_us
        return state.ended

    def _claim(self, job: Job) -> None:
        claim_id = secrets.token_hex(8)
        self._mine.add(claim_id)
        self._awaiting[key_of(job)] = (claim_id, time.monotonic())
        self._write(replace(self._record(job, CLAIM, claim_id), lease_ms=round(self.config.lease_s * 1000)))

    def _serve(self, job: Job, state: NotificationState, now: int) -> None:
        """The owner's turn: give up, POST when the next attempt is due and a slot is free, and
        renew the claim while it POSTs or waits for its next attempt."""
        key, claim_id = state.key, state.claim_id or ""
        if key in self._awaiting:  # claimed again, not read back yet
            return
        if key in self._in_flight:
            self._renew(job, state)
            return
        if self.config.retry.gives_up(state, now):
            reason = f"gave up after {state.attempts} attempt(s); the last: {state.last_error}"
            self._write(replace(self._record(job, GAVE_UP, claim_id), attempts=state.attempts, error=reason))
            self.metrics.gave_up()
            self.on_event(f"notification {key}: {reason}")
            return
        if now < self.config.retry.next_attempt_at(state):  # waiting for its retry: still served
            self._renew(job, state)
            return
        receiver = receiver_of(job.terms.notify or "")
        busy = {flight.receiver for flight in self._in_flight.values()}
        if len(self._in_flight) >= self.config.concurrency or receiver in busy:
            return  # due, and no slot for it: not renewed (the module's docstring says why)
        if state.claimable(now):  # its lease ran out while it waited: another may have claimed it
            self._claim(job)
            return
        self._in_flight[key] = InFlight(job, claim_id, receiver, self._pool.submit(self._attempt, job, claim_id))
        self._renew(job, state)

    def _renew(self, job: Job, state: NotificationState) -> None:
        if time.monotonic() - self._last_write.get(state.key, 0.0) > self.config.lease_s / 3:
            self._write(replace(self._record(job, RENEW, state.claim_id or ""), attempts=state.attempts))

    def _attempt(self, job: Job, claim_id: str) -> Attempt:
        """On the pool: the job's status document (read once, then the same on every retry), POSTed."""
        key = key_of(job)
        body = self._bodies.get(key)
        if body is None:
            try:
                status = job_status(self.settings, self.topics, job.job_id)
            except JobNotFoundError:
                return Attempt(job, claim_id, None, None, "the job is no longer registered", final=True)
            except KAFKA_FAULTS as exc:
                return Attempt(job, claim_id, None, None, f"its status could not be read: {exc}")
            if key_of(status.job) != key:
                reason = "the job was submitted again before this was sent; the new submission is notified on its own"
                return Attempt(job, claim_id, None, None, reason, final=True)
            body = self._bodies[key] = (json.dumps(status.to_dict()).encode(), status.state.value)
        document, state = body
        return Attempt(job, claim_id, state, post(job.terms.notify or "", document, key, self.config.delivery))

    def _collect(self) -> None:
        """Write down each POST that has come back."""
        for key, flight in list(self._in_flight.items()):
            if not flight.future.done():
                continue
            del self._in_flight[key]
            try:
                attempt = flight.future.result()
            except Exception as exc:  # a bug, met on this notification: a failed attempt, not a dead worker
                log.exception("notification %s: the attempt failed unexpectedly", key)
                failed = Answer(False, error=f"internal error: {type(exc).__name__}")
                attempt = Attempt(flight.job, flight.claim_id, None, failed)
            self._record_attempt(attempt)

    def _record_attempt(self, attempt: Attempt) -> None:
        job, key = attempt.job, key_of(attempt.job)
        state = self.log.get(key)
        attempts = state.attempts if state is not None else 0
        base = replace(self._record(job, ATTEMPT, attempt.claim_id), job_state=attempt.job_state)
        if attempt.answer is None:
            if attempt.final:
                self._write(replace(base, kind=GAVE_UP, attempts=attempts, error=attempt.reason))
                self.metrics.gave_up()
            self.on_event(f"notification {key}: not sent: {attempt.reason}")
            return
        answer, attempts = attempt.answer, attempts + 1
        kind = DELIVERED if answer.delivered else ATTEMPT
        self._write(replace(base, kind=kind, attempts=attempts, http_status=answer.http_status, error=answer.error))
        self.metrics.posted(answer.delivered)
        url = redacted(job.terms.notify or "")
        why = f"{answer.error} ({answer.detail})" if answer.detail else answer.error
        if answer.delivered:
            self.on_event(f"notification {key}: delivered to {url} (HTTP {answer.http_status}, try {attempts})")
        elif answer.permanent:
            self._write(replace(base, kind=GAVE_UP, attempts=attempts, error=answer.error))
            self.metrics.gave_up()
            self.on_event(f"notification {key}: gave up on {url}: {why}")
        else:
            delay = self.config.retry.delay_after(attempts)
            self.on_event(f"notification {key}: attempt {attempts} to {url} failed: {why}; next in {delay:g} s")

    def _record(self, job: Job, kind: str, claim_id: str) -> Notification:
        return Notification(
            job.job_id, submission_of(job), kind, self.config.instance_id, claim_id, now_us(), job.terms.notify or ""
        )

    def _write(self, record: Notification) -> None:
        """Queue a record for the log. This notifier's own outcomes count at once (a claim only
        once it is read back: the log decides whether it won)."""
        self._outbox.append(record)
        if record.kind != CLAIM:
            self.log.add(record)
        self._last_write[notification_key(record.job_id, record.submission)] = time.monotonic()

    def _flush(self) -> None:
        if not self._outbox:
            return
        assert self._producer is not None
        records = [OutRecord(self.topics.notifications, encode(r), kafka_key(r).encode()) for r in self._outbox]
        produce_all(self._producer, records)
        self._outbox.clear()

    def run(self, stop: threading.Event, retry_s: float = 5.0) -> None:
        """Step every poll_s until `stop` is set. A broker outage, however long, is waited out:
        every retry_s the clients are made afresh and the topics read again, until it answers."""
        outage = OutageLog("notifier", self.on_event, retry_s)
        step_until_stopped(stop, self._reopened_step, self._drop_clients, outage, self.config.poll_s)

    def _reopened_step(self) -> None:
        if self._follower is None:  # the outage's first step, or a reopen that failed
            self._open()
        self.step()
