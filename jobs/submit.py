"""Submitting a job: validate the whole input first, then produce every record and confirm it."""

from __future__ import annotations

import re
import secrets
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from jobs.job_input import JobInput, Record, check_input, pack_limits_from_env
from jobs.registry import register
from kafka_io.clients import make_producer
from kafka_io.errors import BrokerUnavailableError, DeliveryError
from kafka_io.offsets import group_offsets
from kafka_io.produce import produce_all
from kafka_io.reading import read_range
from kafka_io.records import NO_REUSE_HEADER, OutRecord, records_of
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics, lanes
from kafka_io.topology import DEFAULT_LANE, Lane, Topics
from model_repository.config import check_model_name
from producers import InputError
from schemas import Job, JobTerms, now_us
from schemas.packs import PackSettings


class SubmitInterruptedError(BrokerUnavailableError):
    """Kafka stopped confirming records part way through a submit: the message says how many it stored."""


class BacklogRefusedError(RuntimeError):
    """The job would push the pipeline's backlog past the configured maximum."""


@dataclass(frozen=True)
class SubmitReport:
    job_id: str
    model: str
    submitted: int
    skipped: list[InputError]
    submission: int | None = None  # names this submission of the job id (its records' header)


# A job id is part of every record's key (job_id/record_id), of file names (`nearline report` writes
# JOB_ID.html) and of the tab-separated lines of `jobs list`: one path segment of printable
# characters, as a model name is (model_repository/config.py), upper case allowed.
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
JOB_ID_RULE = "use letters, digits, '.', '_' and '-' (starting with a letter or digit, no '..', at most 100 characters)"


def job_id_problem(job_id: str) -> str | None:
    """Why `job_id` cannot name a job given on the command line, or None when it can."""
    if JOB_ID.fullmatch(job_id) is None or ".." in job_id:
        shown = repr(job_id) if len(job_id) <= 60 else f"{job_id[:40]!r}... ({len(job_id):,} characters)"
        return f"invalid job id {shown}: {JOB_ID_RULE}"
    return None


def new_job_id() -> str:
    return f"job-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def backlog(
    settings: KafkaSettings,
    topics: Topics,
    model: str,
    raw_topic: str,
    priority: Lane = DEFAULT_LANE,
    *,
    packed: bool = True,
    pack_limits: PackSettings | None = None,
) -> dict[str, int]:
    """Records submitted but not yet consumed, in the job's lane: by the preprocess app, and by the
    model's GPU group (a live job is not refused for a batch backfill it will overtake). `packed`:
    the job's topics carry packs (texts; an image is a Kafka record of its own), whose offsets
    count packs, not records (lag_records)."""
    tensors = topics.lane(topics.tensors(model), priority)
    max_records = (pack_limits or pack_limits_from_env()).max_records if packed else 1
    return {
        raw_topic: lag_records(settings, topics.preprocess_app_id, raw_topic, max_records),
        tensors: lag_records(settings, topics.gpu_group(model), tensors, max_records),
    }


# A packed topic's lag is counted in records by reading the `records` header of every Kafka record
# past the group's offsets while there are at most this many (at most 512 MiB at 512 KiB a pack,
# a few MiB for short texts); past that, each counts as a full pack, an upper bound.
COUNTED_LAG = 1000


def lag_records(settings: KafkaSettings, group: str, topic: str, max_records: int = 1) -> int:
    """Records of `topic` the group has yet to consume. Offsets count Kafka records, and one may be
    a pack of up to max_records records: the unconsumed ones are read and their `records` headers
    summed, exactly, while there are at most COUNTED_LAG of them; beyond, lag * max_records, so a
    --max-backlog check may refuse early, never let a job past the maximum."""
    offsets = group_offsets(settings, group, topic)
    lag = sum(o.lag for o in offsets)
    if max_records == 1 or lag == 0:
        return lag
    if lag > COUNTED_LAG:
        return lag * max_records
    start = {o.partition: max(o.committed, 0) for o in offsets if o.lag > 0}
    return sum(record.records for record in read_range(settings, topic, start))


class _Sent:
    """How many records each Kafka record of a submit holds (a pack's `records` header), by key,
    for produce_all to count records, not Kafka records, as the broker confirms them: a delivery
    report carries the key, not the headers. Two Kafka records of one key go to one partition,
    whose reports come in produce order, hence a queue per key. Holds a key per pack, not per record."""

    def __init__(self) -> None:
        self._held: dict[bytes | None, deque[int]] = {}

    def counting(self, records: Iterable[OutRecord]) -> Iterator[OutRecord]:
        for record in records:
            self._held.setdefault(record.key, deque()).append(records_of(record.headers))
            yield record

    def weight(self, key: bytes | None) -> int:
        held = self._held.get(key)
        if not held:
            return 1  # never the case: every confirmed record was sent through counting()
        count = held.popleft()
        if not held:
            del self._held[key]
        return count


def pipeline_topics(topics: Topics, model: str) -> list[TopicSpec]:
    """Every topic a job of `model` goes through; each stage topic in both lanes."""
    stages = (topics.raw_text, topics.raw_image, topics.tensors(model))
    return [
        *(s for t in stages for s in lanes(topics, TopicSpec(t))),
        TopicSpec(topics.results),
        TopicSpec(topics.dead_letters),
    ]


@dataclass(frozen=True)
class JobSettings:
    """How a job is submitted, besides its input and its model."""

    job_id: str | None = None  # None: a new one (new_job_id)
    skip_invalid: bool = False  # submit the valid records of an input with invalid ones
    topic: str | None = None  # the raw topic; None: the input kind's, in the job's lane
    max_backlog: int | None = None  # refuse the job while the pipeline holds more records than this
    schedule: str | None = None  # the schedule that submitted it (jobs/scheduling/)
    attributes: Mapping[str, str] | None = None  # the job's own attributes (a schedule's tick)
    priority: Lane = DEFAULT_LANE
    pack_limits: PackSettings | None = None  # None: pack_limits_from_env
    terms: JobTerms = field(default_factory=JobTerms)  # labels, completion window, webhook


# JobInput.validate_keeping's answer, when the caller ran it: the valid count, the errors and the
# valid records it kept (None: read the input again)
Validated = tuple[int, list[InputError], list[Record] | None]


def computed(records: Iterable[OutRecord]) -> Iterator[OutRecord]:
    """A --no-reuse job's records, each marked so the preprocess worker computes it (docs/reuse.md)."""
    for record in records:
        record.headers = [*record.headers, (NO_REUSE_HEADER, b"1")]  # job_record's list is shared
        yield record


def check_backlog(
    settings: KafkaSettings,
    topics: Topics,
    model: str,
    topic: str,
    valid: int,
    max_backlog: int,
    *,
    packed: bool,
    options: JobSettings,
) -> None:
    """BacklogRefusedError when a job of `valid` records would take the pipeline's backlog in its
    lane (backlog) past max_backlog, or is itself larger, which no wait and no worker would let in."""
    if valid > max_backlog:
        raise BacklogRefusedError(
            f"refused: this job alone has {valid} records, over the maximum backlog of {max_backlog}: "
            "split it into jobs of at most that many records, or raise --max-backlog"
        )
    current = backlog(settings, topics, model, topic, options.priority, packed=packed, pack_limits=options.pack_limits)
    if sum(current.values()) + valid > max_backlog:
        waiting = ", ".join(f"{t}: {n}" for t, n in current.items())
        raise BacklogRefusedError(
            f"refused: the backlog is {sum(current.values())} records ({waiting}); this job adds {valid}, "
            f"over the maximum of {max_backlog}. Retry later or add workers."
        )


def job_row(job_id: str, model: str, source: JobInput, count: int, submitted_at: int, options: JobSettings) -> Job:
    """The registry row of a submission of `count` records, made at submitted_at."""
    return Job(
        job_id,
        model,
        str(source.path),
        source.kind,
        count,
        submitted_at,
        schedule=options.schedule,
        attributes=dict(options.attributes or {}),
        submission=submitted_at,
        columns=source.kept_schema(),
        priority=options.priority,
        terms=options.terms,
        deadline_at=options.terms.deadline_at(submitted_at),
    )


def submit(
    settings: KafkaSettings,
    topics: Topics,
    source: JobInput,
    model: str,
    options: JobSettings | None = None,
    validated: Validated | None = None,
) -> SubmitReport:
    """Produce every valid record of `source` to raw.text or raw.image as one job: texts in packs
    cut by the options' pack_limits (JobInput.out_records), counted as the records they hold.

    With any invalid record and skip_invalid False, nothing is produced (InvalidInputError): a
    half-submitted file is worse than a rejected one. `validated` is source's validation when the
    caller ran it (JobInput.validate_keeping); else it is run here, keeping the records, so the
    input is read and parsed once.
    """
    options = options or JobSettings()
    job_id, skip_invalid, topic, max_backlog = options.job_id, options.skip_invalid, options.topic, options.max_backlog
    priority, pack_limits = options.priority, options.pack_limits
    check_model_name(model)
    valid, errors, records = validated if validated is not None else source.validate_keeping()
    check_input(source, (valid, errors), skip_invalid)
    job_id = job_id or new_job_id()
    topic = topic or source.raw_topic(topics, priority)
    ensure_topics(settings, [*pipeline_topics(topics, model), TopicSpec(topic)])
    if max_backlog is not None:
        check_backlog(settings, topics, model, topic, valid, max_backlog, packed=source.kind == "text", options=options)
    # Not idempotent: a fresh idempotent producer holds every record for 0.5-1 s while it gets a
    # producer id, the whole latency of a small job. A retry's duplicate is dropped downstream like
    # any at-least-once redelivery (results are keyed by job and sequence).
    producer = make_producer(settings.with_client_id(f"submit-{job_id}"), idempotent=False)
    late: list[InputError] = []
    submitted_at = now_us()
    sent = _Sent()
    try:
        out = source.out_records(job_id, model, topic, late, submitted_at, records, pack_limits)
        if not options.terms.reuse:
            out = computed(out)
        count = produce_all(producer, sent.counting(out), weight=sent.weight)
    except DeliveryError as exc:
        raise SubmitInterruptedError(
            f"job {job_id}: Kafka at {settings.bootstrap_servers} stopped taking records mid-submit ({exc}). "
            f"It confirmed {exc.confirmed} of {valid} records; the job was not registered, so nothing waits for "
            f"them. Submit it again once Kafka is back; with --job-id {job_id}, only the new submission counts."
        ) from None
    # Registered once every record is stored, so a registered job's total is what was submitted.
    register(settings, topics, job_row(job_id, model, source, count, submitted_at, options))
    known = set(errors)
    changed = [replace(e, reason=f"changed since validation: {e.reason}") for e in late if e not in known]
    return SubmitReport(job_id, model, count, errors + changed, submitted_at)
