"""Schedules as data: rows of the compacted `schedules` topic, and the tick claims beside them.

`nearline schedule add|pause|resume|rm` write here; the scheduler process (jobs/scheduling/scheduler.py)
follows the same topics. Nothing lives on a local disk, so a schedule survives any restart.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from jobs.input_problems import options_problem
from jobs.scheduling.cron import Misfire, check_spec, from_us, next_tick
from jobs.scheduling.errors import ScheduleExistsError, ScheduleNotFoundError, ScheduleSpecError
from jobs.submit import JOB_ID
from kafka_io.groups import group_names, live_groups
from kafka_io.reading import read_topics
from kafka_io.settings import KafkaSettings
from kafka_io.tables import put_row, read_records
from kafka_io.topics import schedule_ticks_topic, schedules_topic
from kafka_io.topology import Topics
from model_repository.config import check_model_name
from producers import JSONL_SUFFIXES
from producers.table_rows import DEFAULT_COLUMNS, Columns
from producers.tables import table_format
from schemas import JobTerms, Schedule, ScheduleTick, SerdeError, decode, encode, now_us


def absolute_input(pattern: str) -> str:
    """The scheduler may run in another directory: store what the user meant, not what they typed."""
    return os.path.abspath(os.path.expanduser(pattern))


# A schedule's name begins the job id of every tick (`tick_job_id`: NAME-YYYYMMDDTHHMMZ), so it
# follows the job-id rule, and leaves room for the 15-character tick suffix: a newline or a tab
# in it would have broken `jobs list` and `status` as an unchecked --job-id did.
MAX_SCHEDULE_NAME = 100 - len("-20260101T0000Z")


def schedule_name_problem(name: str) -> str | None:
    """Why `name` cannot name a schedule, or None when it can."""
    if JOB_ID.fullmatch(name) is None or ".." in name or len(name) > MAX_SCHEDULE_NAME:
        shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}... ({len(name):,} characters)"
        return (
            f"invalid schedule name {shown}: it begins the job id of every run, so use letters, digits, "
            f"'.', '_' and '-' (starting with a letter or digit, no '..', at most {MAX_SCHEDULE_NAME} characters)"
        )
    return None


@dataclass(frozen=True)
class ScheduleSpec:
    """What `nearline schedule add` asks for: checked by new_schedule before it is stored."""

    name: str
    cron: str
    input_pattern: str  # a file, a folder or a glob, made absolute when stored
    model: str
    timezone: str = "UTC"
    misfire: Misfire = "skip"
    columns: Columns = DEFAULT_COLUMNS
    priority: str = "bulk"
    terms: JobTerms = field(default_factory=JobTerms)  # put on every job it submits


def new_schedule(spec: ScheduleSpec, at_us: int | None = None) -> Schedule:
    """The schedule `spec` asks for, created at `at_us` (now by default); ScheduleSpecError if it is not one."""
    if (problem := schedule_name_problem(spec.name)) is not None:
        raise ScheduleSpecError(problem)
    check_spec(spec.cron, spec.timezone, spec.misfire)
    check_model_name(spec.model)
    if not spec.input_pattern.strip():  # it would be stored as the folder the command ran in
        raise ScheduleSpecError("the schedule's input is empty: name a file, a folder or a glob pattern")
    now = at_us if at_us is not None else now_us()
    pattern = absolute_input(spec.input_pattern)
    if (problem := _columns_problem(spec.columns, pattern)) is not None:
        raise ScheduleSpecError(f"{problem}; every tick's job would fail on it")
    return Schedule(
        spec.name,
        spec.cron,
        pattern,
        spec.model,
        spec.timezone,
        spec.misfire,
        False,
        now,
        now,
        spec.columns.to_json(),
        spec.priority,
        spec.terms,
    )


def _columns_problem(columns: Columns, pattern: str) -> str | None:
    """Why the column options cannot apply to what the pattern's suffix says its files are (table
    options for "*.jsonl", JSON Lines keys for "*.parquet"), said when the schedule is added rather
    than by a failed job at every tick; None when they can, or when the name does not say."""
    name = Path(pattern)
    reads = "table" if table_format(name) else "jsonl" if name.suffix.lower() in JSONL_SUFFIXES else None
    return None if reads is None else options_problem(columns, reads, pattern)


def unserved_model(settings: KafkaSettings, topics: Topics, model: str) -> str | None:
    """What becomes of `model`'s jobs, if no GPU worker serves it on the cluster now, else None.

    A note, not a refusal: the workers may start later, or only at the tick's hour. It is there
    for the typo that would otherwise submit a job each tick that nothing ever runs."""
    group = topics.gpu_group(model)
    if live_groups(settings, [group]):
        return None
    prefix = topics.gpu_group("")
    known = [g.removeprefix(prefix) for g in group_names(settings, prefix)]
    close = difflib.get_close_matches(model, [m for m in known if m != model], n=1)
    waits = f"no GPU worker serves {model} on this cluster now (consumer group {group} has no member)"
    mean = f"; did you mean {close[0]}?" if close else "."
    # Not "its jobs will wait": the model is looked up by the preprocess workers, in their own
    # repository, which neither this command nor the scheduler reads (deploy/kubernetes/config.yaml).
    # Where it lacks the model, each record is dead-lettered at once, and waits for nothing.
    return (
        f"{waits}{mean} Its jobs' records wait for one only if the preprocess workers' model repository has "
        f"{model}; if it does not, every record is dead-lettered at preprocessing (ModelNotFoundError) until "
        f"{model} is added there (nearline models prepare|import), and `nearline dlq replay --job JOB` puts "
        "them back"
    )


def load_schedules(settings: KafkaSettings, topics: Topics) -> dict[str, Schedule]:
    return read_records(settings, schedules_topic(topics), Schedule)


def add_schedule(settings: KafkaSettings, topics: Topics, schedule: Schedule, replace_existing: bool = False) -> None:
    if not replace_existing and schedule.name in load_schedules(settings, topics):
        raise ScheduleExistsError(f"schedule {schedule.name} exists: remove it first, or pass --replace")
    put_row(settings, schedules_topic(topics), schedule.name, encode(schedule))


def find_schedule(settings: KafkaSettings, topics: Topics, name: str) -> Schedule:
    try:
        return load_schedules(settings, topics)[name]
    except KeyError:
        raise ScheduleNotFoundError(f"no schedule {name} in {topics.schedules}") from None


def set_paused(settings: KafkaSettings, topics: Topics, name: str, paused: bool, at_us: int | None = None) -> Schedule:
    """Pause, or resume from now: ticks that fell while paused never run, whatever the misfire policy."""
    current = find_schedule(settings, topics, name)
    since = at_us if at_us is not None else now_us()
    updated = replace(current, paused=paused, active_since=current.active_since if paused else since)
    put_row(settings, schedules_topic(topics), name, encode(updated))
    return updated


def remove_schedule(settings: KafkaSettings, topics: Topics, name: str) -> None:
    find_schedule(settings, topics, name)
    put_row(settings, schedules_topic(topics), name, None)


def load_ticks(settings: KafkaSettings, topics: Topics) -> list[ScheduleTick]:
    """Every claim, in log order (the order that decides which claim of a tick won)."""
    out = []
    for msg in read_topics(settings, [schedule_ticks_topic(topics).name]):
        if not msg.deleted:
            try:
                out.append(decode(msg.value, ScheduleTick))
            except SerdeError:
                continue
    return out


@dataclass
class TickClaims:
    """The claims log folded in log order. The first claim of a tick wins: the one rule every
    scheduler, and `schedule list`, applies to the same log."""

    first: dict[tuple[str, int], ScheduleTick] = field(default_factory=dict)  # (schedule, tick) -> winner
    newest: dict[str, int] = field(default_factory=dict)  # schedule -> its newest claimed tick

    def add(self, claim: ScheduleTick) -> None:
        self.first.setdefault((claim.schedule, claim.tick_at), claim)
        self.newest[claim.schedule] = max(self.newest.get(claim.schedule, 0), claim.tick_at)

    @classmethod
    def of(cls, claims: list[ScheduleTick]) -> TickClaims:
        folded = cls()
        for claim in claims:
            folded.add(claim)
        return folded


@dataclass(frozen=True)
class ScheduleView:
    schedule: Schedule
    next_tick: datetime | None
    last_tick: ScheduleTick | None

    def to_dict(self) -> dict[str, object]:
        s = self.schedule
        return {
            "name": s.name,
            "cron": s.cron,
            "timezone": s.timezone,
            "input": s.input,
            "model": s.model,
            "misfire": s.misfire,
            "priority": s.priority,
            "labels": dict(s.terms.labels),
            "complete_within_s": s.terms.complete_within_s,
            "notify": s.terms.notify,
            "reuse": s.terms.reuse,
            "state": "paused" if s.paused else "active",
            "active_since": from_us(s.active_since).isoformat(),
            "next_tick": self.next_tick.isoformat() if self.next_tick else None,
            "last_tick": from_us(self.last_tick.tick_at).isoformat() if self.last_tick else None,
            "last_job_id": self.last_tick.job_id if self.last_tick else None,
        }


def describe(settings: KafkaSettings, topics: Topics, now: datetime) -> list[ScheduleView]:
    schedules = load_schedules(settings, topics)
    claims = TickClaims.of(load_ticks(settings, topics))
    last: dict[str, ScheduleTick] = {}
    for s in schedules.values():
        newest = claims.newest.get(s.name, 0)
        # ticks run only after a schedule is created: earlier claims belong to a removed namesake
        if newest > s.created_at:
            last[s.name] = claims.first[(s.name, newest)]
    return [
        ScheduleView(s, None if s.paused else next_tick_or_none(s, now), last.get(s.name))
        for s in sorted(schedules.values(), key=lambda s: s.name)
    ]


def next_tick_or_none(schedule: Schedule, now: datetime) -> datetime | None:
    """None for a cron that never fires (February 31), which older versions let be stored: the
    listing must still show every other schedule."""
    try:
        return next_tick(schedule.cron, schedule.timezone, now)
    except ScheduleSpecError:
        return None
