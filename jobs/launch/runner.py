"""`nearline run`: the whole pipeline for one input, on the embedded broker unless a cluster is named."""

from __future__ import annotations

import fcntl
import signal
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from jobs.job_input import JobInput, check_input
from jobs.launch.embedded import EmbeddedPipeline
from jobs.liveness import JobInterrupted, JobTimeoutError, JobWaitError, Liveness, WorkersGoneError
from jobs.progress import Progress, Summary
from jobs.registry import CancelWatch
from jobs.submit import JobSettings, SubmitReport, submit
from kafka_io.clients import check_not_refused
from kafka_io.errors import KAFKA_FAULTS
from kafka_io.groups import answered_live_groups, committed_total
from kafka_io.offsets import group_lag
from kafka_io.reading import TopicFollower
from kafka_io.settings import KafkaSettings
from kafka_io.topology import DEFAULT_LANE, LANES, Lane, Topics
from model_repository.config import ModelConfig, ModelNotFoundError
from model_repository.folders import load_model_config, move_hint
from results.kept_columns import KeptColumns
from results.outcome import JobFold, JobOutcome
from results.spill import ResultSpill
from schemas import JobTerms

ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class RunResult:
    report: SubmitReport
    # complete, or what had arrived when `failure` stopped the wait; open: the caller writes it
    # out and closes it (a context manager)
    results: ResultSpill
    summary: Summary
    failure: JobWaitError | None = None


def ensure_model(repository: Path, model: str, log: Callable[[str], None]) -> ModelConfig:
    """The model's config, preparing it from its package first if the repository lacks it. Runs
    started together (from any folder: the repository is per user) export it once, under a lock;
    one left in ./models (the old default) is pointed at rather than exported again."""
    try:
        return load_model_config(repository, model)
    except ModelNotFoundError:
        from model_import.export import PREPARERS

        if model not in PREPARERS or move_hint(repository, model):
            raise
    repository.mkdir(parents=True, exist_ok=True)
    with (repository / ".prepare.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return load_model_config(repository, model)  # prepared while this run waited for the lock
        except ModelNotFoundError:
            log(f"model {model} is not in {repository}; preparing it (once)...")
            return PREPARERS[model](repository)


def _nothing() -> None:
    return None


def _no_watch(fold: JobFold) -> None:
    return None


@dataclass(frozen=True)
class WaitRules:
    """How a wait follows a job: what it reports, what ends it early, how long it may take."""

    on_progress: ProgressCallback | None = None
    check: Callable[[], None] = _nothing  # raises to stop the wait (a worker of ours died)
    watchdog: Callable[[JobFold], None] = _no_watch  # raises a JobWaitError (e.g. WorkersGoneError)
    every_s: float = 0.5  # a terminal's bar redraws this often; plain lines pace themselves
    timeout_s: float | None = None  # JobTimeoutError after this long


def watch_job(
    settings: KafkaSettings,
    topics: Topics,
    job_id: str,
    total: int,
    rules: WaitRules | None = None,
    *,
    submission: int | None = None,
    keep_results: bool = True,
) -> tuple[JobOutcome, float]:
    """follow_job into a JobOutcome in memory: (outcome, seconds). keep_results False keeps each
    record's version and dead letter only (a wait that reports counts: no InferenceResult made,
    ~4 us a record, and no job's worth of embeddings held in memory)."""
    # a resubmitted job id: this submission only
    outcome = JobOutcome(job_id, submission=submission, keep_results=keep_results)
    seconds = follow_job(settings, topics, outcome, total, rules)
    return outcome, seconds


def follow_job(
    settings: KafkaSettings, topics: Topics, fold: JobFold, total: int, rules: WaitRules | None = None
) -> float:
    """Fold results and dead letters into `fold` until every record of the job has one; the seconds taken.

    JobTimeoutError after rules.timeout_s without the job completing; rules.watchdog(fold) raises a
    JobWaitError (e.g. WorkersGoneError) to stop early. Either carries the fold so far."""
    rules = rules or WaitRules()
    on_progress, check, watchdog, every_s, timeout_s = (
        rules.on_progress,
        rules.check,
        rules.watchdog,
        rules.every_s,
        rules.timeout_s,
    )
    job_id = fold.job_id
    started = time.monotonic()
    progress = Progress(total, started)
    last_report = 0.0
    try:
        with TopicFollower(settings, [topics.results, topics.dead_letters]) as follower:
            while fold.done < total:
                fold.add(follower.poll(0.2), topics)
                if fold.done >= total:
                    break
                check()
                watchdog(fold)
                now = time.monotonic()
                if timeout_s is not None and now - started > timeout_s:
                    raise JobTimeoutError(
                        f"job {job_id}: {fold.done} of {total} records done when --timeout-s {timeout_s:g} passed"
                    )
                if on_progress and now - last_report >= every_s:
                    progress.done, progress.failed = fold.done, fold.failed
                    on_progress(progress)
                    last_report = now
    except JobWaitError as exc:
        exc.outcome = fold
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP turned into one by jobs.launch.signals
        signum = getattr(exc, "signum", signal.SIGINT)
        raise JobInterrupted(
            f"stopped by {signal.Signals(signum).name} with {fold.done} of {total} records done",
            signum,
            fold,
        ) from None
    if on_progress:
        progress.done, progress.failed = fold.done, fold.failed
        on_progress(progress)
    return time.monotonic() - started


Watchdog = Callable[[JobFold], None]


def all_of(*watchdogs: Watchdog) -> Watchdog:
    """One watchdog that asks each of `watchdogs` in turn: the first to raise stops the wait."""

    def check(outcome: JobFold) -> None:
        for watchdog in watchdogs:
            watchdog(outcome)

    return check


def worker_liveness(
    settings: KafkaSettings, topics: Topics, model: str, grace_s: float, every_s: float = 2.0
) -> Callable[[JobFold], None]:
    """A watch_job watchdog for workers we did not start: WorkersGoneError once a stage the job
    still needs has had no member in its consumer group, and no record completed, for grace_s.

    Both stages count: with no preprocess worker, nothing reaches the GPU group, which stays live
    and waits for ever. A group's state alone is not trusted: Tansu reports the group of a
    SIGKILLed worker STABLE, listing no members, for minutes (docs/brokers.md), so a group
    "live" by state whose committed offsets did not move for grace_s counts as gone too (see
    _Stall), and is then blamed only if the job still needs it. A broker that does not answer says
    nothing about the workers: an outage never counts against them."""
    stages = {"GPU": topics.gpu_group(model), "preprocess": topics.preprocess_app_id}
    started = time.monotonic()
    liveness = {stage: Liveness(grace_s, last_alive=started) for stage in stages}
    stalls = {stage: _Stall(settings, group, grace_s, started) for stage, group in stages.items()}
    stalled: set[str] = set()  # the stages last seen "live" by state but committing nothing
    last_asked = float("-inf")

    def check(outcome: JobFold) -> None:
        nonlocal last_asked
        now = time.monotonic()
        if now - last_asked >= every_s:
            last_asked = now
            live = answered_live_groups(settings, list(stages.values()))
            stalled.clear()
            for stage, group in stages.items():
                if live is not None and group in live and not stalls[stage].moved(now):
                    live.discard(group)
                    stalled.add(stage)
                liveness[stage].observe(now, live is None or group in live, outcome.done)
        for stage, group in stages.items():
            silent = liveness[stage].gone_for(now)
            if silent is None:
                continue
            if stage == "preprocess":
                missing = _not_preprocessed(settings, topics, outcome.job_id)
                if missing == 0:  # every record is past that stage: only the GPU one matters now
                    liveness[stage].observe(now, True, outcome.done)
                    continue
                raise WorkersGoneError(
                    f"no preprocess worker alive for {silent:.0f} s (consumer group {group} has no members) and "
                    f"{'some' if missing is None else missing} record(s) of job {outcome.job_id} not preprocessed: "
                    "start one (nearline worker preprocess) and wait again with "
                    f"nearline status {outcome.job_id} --watch"
                )
            why = f"consumer group {group} has no members"
            if stage in stalled:
                waiting = _gpu_backlog(settings, topics, model)
                if not waiting:  # idle with nothing to do (or unknown): the preprocess side is the one to watch
                    liveness[stage].observe(now, True, outcome.done)
                    continue
                why = (
                    f"consumer group {group} committed nothing for {silent:.0f} s while {waiting} Kafka record(s) of "
                    "tensors (each a record or a pack of them) wait past its offsets"
                )
            raise WorkersGoneError(
                f"no GPU worker for {model} alive for {silent:.0f} s ({why}): "
                "start workers (nearline worker preprocess / nearline worker gpu) and wait again with "
                f"nearline status {outcome.job_id} --watch"
            )

    return check


class _Stall:
    """Whether a group's committed offsets moved in the last grace_s. Tansu calls a group STABLE,
    listing no members, for minutes after its only member was SIGKILLed, and `submit --wait`
    waited on it: a group that is "live" by state but committed nothing for grace_s is treated
    as gone, and the watchdog then asks whether the job still needs that stage (an idle worker
    with nothing of the job left to do is not blamed). On Kafka a live worker's offsets move
    just the same, so the signal is as honest there."""

    def __init__(self, settings: KafkaSettings, group: str, grace_s: float, now: float) -> None:
        self._settings, self._group, self._grace_s = settings, group, grace_s
        self._total: int | None = None
        self._moved_at = now

    def moved(self, now: float) -> bool:
        total = committed_total(self._settings, self._group)
        if total is None:  # no answer says nothing about the worker
            return True
        if total != self._total:
            self._total, self._moved_at = total, now
        return now - self._moved_at <= self._grace_s


def _gpu_backlog(settings: KafkaSettings, topics: Topics, model: str) -> int | None:
    """Kafka records of tensors, of any job, past the GPU group's committed offsets in both lanes;
    None if that cannot be read now. Asked once the GPU stage looks gone, not every poll: it reads
    the lanes' true ends (kafka_io.offsets). Kafka records, not records: a text model's are packs
    (schemas/packs.py), and whether any wait is all the watchdog asks; the message says which."""
    tensors, group = topics.tensors(model), topics.gpu_group(model)
    try:
        return sum(group_lag(settings, group, topics.lane(tensors, lane)) for lane in LANES)
    except KAFKA_FAULTS:
        return None


def _not_preprocessed(settings: KafkaSettings, topics: Topics, job_id: str) -> int | None:
    """How many of the job's records no preprocess worker has handled; None if that cannot be read
    now. Asked once a stage looks gone, not every poll: it reads the model's tensor topic."""
    from jobs.registry import job_status

    try:
        counts = job_status(settings, topics, job_id).counts()
    except KAFKA_FAULTS:
        return None
    return counts["submitted"] - counts["preprocessed"]


def summarize(fold: JobFold, seconds: float) -> Summary:
    sizes = fold.batch_sizes()
    mean = sum(sizes.values()) / len(sizes) if sizes else 0.0
    records, tokens = fold.done - fold.failed, fold.completion_tokens()
    return Summary(records, fold.failed, seconds, len(sizes), mean, tokens, fold.reused_count())


@dataclass(frozen=True)
class RunSettings:
    """What `nearline run` is told besides its input and model (jobs/cli/job_submit.py builds it)."""

    repository: Path
    bootstrap_servers: str = ""  # a cluster's; empty: an embedded broker and workers of its own
    namespace: str = ""
    job_id: str | None = None
    skip_invalid: bool = False
    worker_args: tuple[str, ...] = ()  # more arguments of the embedded GPU worker
    timeout_s: float | None = None
    worker_grace_s: float = 30.0  # on a cluster: how long the job may wait for a GPU worker to join
    priority: Lane = DEFAULT_LANE
    terms: JobTerms = field(default_factory=JobTerms)  # labels, completion window, webhook


def run_job(
    source: JobInput,
    model: str,
    run: RunSettings,
    log: Callable[[str], None] = print,
    on_progress: ProgressCallback | None = None,
) -> RunResult:
    """Validate, start what is missing (broker, workers), submit, follow to the end, stop what we started.

    A wait that ends early (timeout, workers or broker gone) returns the results so far with `failure` set."""
    valid, errors, records = source.validate_keeping()  # the records kept: submit reads the input once
    repository, bootstrap_servers, namespace = run.repository, run.bootstrap_servers, run.namespace
    check_input(source, (valid, errors), run.skip_invalid)  # before any broker or worker starts
    topics = Topics(namespace)
    with ExitStack() as stack:
        if bootstrap_servers:
            settings = KafkaSettings.from_env(bootstrap_servers)
            check_not_refused(settings)
            watchdog = worker_liveness(settings, topics, model, run.worker_grace_s)
        else:
            ensure_model(repository, model, log)
            embedded = EmbeddedPipeline(model, topics, log)
            settings = embedded.start(stack, repository, namespace, run.worker_args)
            watchdog = embedded.liveness

        report = submit(
            settings,
            topics,
            source,
            model,
            JobSettings(run.job_id, run.skip_invalid, priority=run.priority, terms=run.terms),
            (valid, errors, records),
        )
        log(f"submitted {report.submitted} record{'' if report.submitted == 1 else 's'} as job {report.job_id}")
        started = time.monotonic()
        # on disk, not in memory: a job of millions of embeddings is gigabytes of results
        spill = ResultSpill(report.job_id, submission=report.submission, kept=KeptColumns.of(source.kept_schema()))
        try:
            # a job cancelled mid-run (nearline cancel, on a cluster or on the broker the run started)
            with CancelWatch(settings, topics, report.job_id, report.submission) as cancelled:
                rules = WaitRules(on_progress, watchdog=all_of(cancelled, watchdog), timeout_s=run.timeout_s)
                seconds = follow_job(settings, topics, spill, report.submitted, rules)
            if not bootstrap_servers:
                embedded.finish(settings)
        except JobWaitError as exc:
            return RunResult(report, spill, summarize(spill, time.monotonic() - started), exc)
        except BaseException:  # Ctrl-C included, even after the wait: the spill is not left on disk
            spill.close()
            raise
    return RunResult(report, spill, summarize(spill, seconds))
