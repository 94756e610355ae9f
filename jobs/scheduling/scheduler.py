"""The scheduler process (`nearline worker scheduler`): one ordinary job per schedule tick.

Any number of schedulers may run. Each follows the `schedules` and `schedule.ticks` topics; when
a tick falls due, a scheduler appends a claim for it to `schedule.ticks` (one partition) and reads
the log up to its own claim. The first claim of a tick in that log wins, and every scheduler reads
the same log in the same order, so exactly one of them submits the tick's job, however many
raced. The job id is derived from the tick, so a winner that died mid-submission and is
restarted with the same --instance-id finishes the same job rather than starting a second one.

The clock is injected so misfire policies are tested without waiting for wall time.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from jobs.job_input import JobInput
from jobs.outages import OutageLog, step_until_stopped
from jobs.registry import load_jobs, register
from jobs.scheduling.cron import from_us, plan_ticks, tick_job_id, to_us
from jobs.scheduling.metrics import SchedulerMetrics
from jobs.scheduling.schedules import TickClaims
from jobs.submit import JobSettings, submit
from kafka_io.clients import Producer, make_producer
from kafka_io.errors import KAFKA_FAULTS, BrokerUnavailableError, KafkaRefusedError
from kafka_io.produce import produce_all
from kafka_io.reading import TopicFollower
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import ensure_topics, schedule_ticks_topic, schedules_topic
from kafka_io.topology import Topics
from producers.table_rows import Columns
from schemas import Job, Schedule, ScheduleTick, SerdeError, decode, encode, now_us

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
# Claims older than this are left alone at start-up: the ticks topic may have compacted them.
RESUME_WINDOW = timedelta(hours=23)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class SchedulerSettings:
    instance_id: str
    grace: timedelta = timedelta(seconds=30)  # a tick this late is still on time, not missed
    max_catch_up: int = 100
    poll_s: float = 1.0


@dataclass(frozen=True)
class Unfinished:
    schedule: str
    tick_at: int
    job_id: str


class Scheduler:
    def __init__(
        self,
        settings: KafkaSettings,
        topics: Topics,
        config: SchedulerSettings,
        clock: Clock = utc_now,
        on_event: Callable[[str], None] = log.info,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.settings = settings.with_client_id(f"scheduler-{config.instance_id}")
        self.metrics = metrics or SchedulerMetrics()
        self.topics = topics
        self.config = config
        self.clock = clock
        self.on_event = on_event
        self.schedules: dict[str, Schedule] = {}
        self.ticks = TickClaims()
        self._skipped_to: dict[str, datetime] = {}  # local only: missed ticks already reported
        self._unfinished: list[Unfinished] = []  # ticks won whose job is not submitted yet
        self._follower: TopicFollower | None = None
        self._producer: Producer | None = None
        self._awaiting: str | None = None  # the claim id this scheduler waits to read back

    def __enter__(self) -> Scheduler:
        self._open()
        return self

    def _open(self) -> None:
        ensure_topics(self.settings, [schedules_topic(self.topics), schedule_ticks_topic(self.topics)])
        self._follower = TopicFollower(self.settings, [self.topics.schedules, self.topics.schedule_ticks])
        self._producer = make_producer(self.settings)
        self.schedules, self.ticks = {}, TickClaims()
        self.catch_up()
        self._unfinished = self._own_unfinished_claims()

    def _drop_clients(self) -> None:
        """Forget the clients and what they read: after a broker restart the old ones can be wedged
        (docs/brokers.md), and what was read before may be gone. The next step opens afresh."""
        if self._follower is not None:
            self._follower.close()
            self._follower = None
        self._producer = None

    def __exit__(self, *exc: object) -> None:
        self._drop_clients()

    def catch_up(self) -> None:
        """Apply every schedule change and claim written so far."""
        assert self._follower is not None, "use the scheduler as a context manager"
        self._apply(self._follower.poll_to_end())

    def _apply(self, messages: list[ConsumedRecord]) -> None:
        for msg in messages:
            key, value = msg.key_text, None if msg.deleted else msg.value
            try:
                if msg.topic == self.topics.schedules:
                    if value is None:
                        self.schedules.pop(key, None)
                    else:
                        self.schedules[key] = decode(value, Schedule)
                elif value is not None:
                    claim = decode(value, ScheduleTick)
                    if claim.claim_id == self._awaiting:
                        self._awaiting = None
                    self.ticks.add(claim)
            except SerdeError as exc:
                log.warning("ignoring an unreadable record in %s at offset %s: %s", msg.topic, msg.offset, exc)

    def _own_unfinished_claims(self) -> list[Unfinished]:
        horizon = to_us(self.clock() - RESUME_WINDOW)
        mine = [c for c in self.ticks.first.values() if c.scheduler == self.config.instance_id and c.tick_at >= horizon]
        if not mine:
            return []
        registered = load_jobs(self.settings, self.topics)
        return [Unfinished(c.schedule, c.tick_at, c.job_id) for c in mine if c.job_id not in registered]

    def step(self) -> list[str]:
        """Run what is due now; returns the ids of the jobs this scheduler submitted."""
        self.catch_up()
        submitted = self._retry_unfinished()
        now = self.clock()
        for schedule in list(self.schedules.values()):
            if schedule.paused:
                continue
            try:
                cursor = from_us(max(self.ticks.newest.get(schedule.name, 0), schedule.active_since))
                cursor = max(cursor, self._skipped_to.get(schedule.name, cursor))
                plan = plan_ticks(
                    schedule.cron,
                    schedule.timezone,
                    schedule.misfire,
                    cursor,
                    now,
                    self.config.grace,
                    self.config.max_catch_up,
                )
            except Exception as exc:  # a schedule row no `schedule add` would write: skip it, run the rest
                self.on_event(f"schedule {schedule.name}: cannot plan its ticks, skipped: {exc}")
                continue
            if plan.skipped and plan.first_skipped and plan.last_skipped:
                self._skipped_to[schedule.name] = plan.last_skipped
                self.on_event(
                    f"schedule {schedule.name}: {plan.skipped} missed tick(s) from {plan.first_skipped:%Y-%m-%d %H:%M} "
                    f"to {plan.last_skipped:%Y-%m-%d %H:%M} UTC not run (misfire={schedule.misfire})"
                )
            for tick in plan.run:
                if self.claim(schedule.name, tick):
                    job_id = self._submit(schedule, tick)
                    if job_id is not None:
                        submitted.append(job_id)
        return submitted

    def claim(self, name: str, tick: datetime) -> bool:
        """Append a claim on the tick and read the log up to it: True if it is the first claim."""
        assert self._follower is not None and self._producer is not None
        key = (name, to_us(tick))
        if key in self.ticks.first:
            return False  # someone claimed it already (maybe this scheduler, before a restart)
        mine = ScheduleTick(
            name, to_us(tick), tick_job_id(name, tick), self.config.instance_id, secrets.token_hex(8), now_us()
        )
        self._awaiting = mine.claim_id
        produce_all(
            self._producer,
            [OutRecord(self.topics.schedule_ticks, encode(mine), f"{name}@{tick.isoformat()}".encode())],
        )
        deadline = time.monotonic() + 60
        while self._awaiting is not None:  # every claim before ours is applied once ours is
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(f"claim on {name} {tick} was acked but not read back in 60 s")
            self._apply(self._follower.poll(0.1))
        winner = self.ticks.first[key]
        self.metrics.claimed(won=winner.claim_id == mine.claim_id)
        if winner.claim_id != mine.claim_id:
            self.on_event(f"schedule {name}: tick {tick:%Y-%m-%d %H:%M} UTC is {winner.scheduler}'s, not submitting")
            return False
        return True

    def _submit(self, schedule: Schedule, tick: datetime) -> str | None:
        job_id = tick_job_id(schedule.name, tick)
        try:
            source = JobInput.matching(schedule.input, columns=Columns.from_json(schedule.columns))
            report = submit(
                self.settings,
                self.topics,
                source,
                schedule.model,
                JobSettings(
                    job_id=job_id,
                    schedule=schedule.name,
                    attributes={"tick": tick.isoformat()},
                    priority="live" if schedule.priority == "live" else "bulk",
                    terms=schedule.terms,
                ),
            )
        except (ValueError, OSError) as exc:  # input missing, unreadable or invalid: the job fails, the tick is done
            self._fail(schedule, tick, job_id, str(exc))
            return None
        except KAFKA_FAULTS as exc:
            self._unfinished.append(Unfinished(schedule.name, to_us(tick), job_id))
            self.on_event(f"schedule {schedule.name}: job {job_id} not submitted yet, will retry: {exc}")
            return None
        except KafkaRefusedError:
            raise  # Kafka said no to this worker's principal: every tick would meet it, the worker exits
        except Exception as exc:
            # Anything else is a bug met on this schedule's input. Raising would stop every schedule,
            # and a restart would retry this same claimed tick and raise again: fail the tick instead.
            log.exception("schedule %s: tick %s failed unexpectedly", schedule.name, tick)
            self._fail(schedule, tick, job_id, f"internal error: {type(exc).__name__}: {exc}")
            return None
        self.metrics.submitted()
        self.on_event(
            f"schedule {schedule.name}: tick {tick:%Y-%m-%d %H:%M} UTC submitted job {job_id} "
            f"({report.submitted} records)"
        )
        return job_id

    def _fail(self, schedule: Schedule, tick: datetime, job_id: str, reason: str) -> None:
        """Register the tick's job as failed with the reason: the tick is done, the schedule goes on.
        It has the schedule's terms, as a job it submits has: found by its labels, and its webhook told."""
        failed = Job(
            job_id,
            schedule.model,
            schedule.input,
            "unknown",
            0,
            now_us(),
            schedule=schedule.name,
            error=reason,
            priority=schedule.priority,
            terms=schedule.terms,
        )
        register(self.settings, self.topics, failed)
        self.metrics.failed()
        self.on_event(f"schedule {schedule.name}: tick {tick:%Y-%m-%d %H:%M} UTC, job {job_id} failed: {reason}")

    def _retry_unfinished(self) -> list[str]:
        pending, self._unfinished = self._unfinished, []
        done = []
        for item in pending:
            schedule = self.schedules.get(item.schedule)
            if schedule is None:
                continue  # removed since: its tick goes with it
            self.on_event(f"schedule {item.schedule}: finishing job {item.job_id}, claimed before a restart")
            job_id = self._submit(schedule, from_us(item.tick_at))
            if job_id is not None:
                done.append(job_id)
        return done

    def run(self, stop: threading.Event, retry_s: float = 5.0) -> None:
        """Step about once a second until `stop` is set. A broker outage, however long, is waited
        out: every retry_s the clients are made afresh and the state read again, until it answers."""
        outage = OutageLog("scheduler", self.on_event, retry_s)
        step_until_stopped(
            stop,
            self._reopened_step,
            self._drop_clients,
            outage,
            self.config.poll_s,
            note=lambda: f"; {len(self.schedules)} schedule(s) read afresh",
        )

    def _reopened_step(self) -> None:
        if self._follower is None:  # the outage's first step, or a reopen that failed
            self._open()
        self.step()
