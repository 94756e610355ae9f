"""`nearline run`: the whole pipeline for one input, on the embedded broker unless a cluster is named."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from jobs.local import WorkerProcess, start_pipeline_workers, stop_all
from jobs.progress import Progress, Summary
from jobs.results import JobOutcome
from jobs.submit import InvalidInputError, JobInput, SubmitReport, pipeline_topics, submit
from kafka_io.broker import EmbeddedBroker
from kafka_io.reading import TopicFollower
from kafka_io.settings import KafkaSettings, Topics
from kafka_io.topics import ensure_topics
from schemas.model_config import ModelConfig, ModelNotFoundError, load_model_config

ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class RunResult:
    report: SubmitReport
    outcome: JobOutcome
    summary: Summary


def ensure_model(repository: Path, model: str, log: Callable[[str], None]) -> ModelConfig:
    """The model's config, preparing it from its package first if the repository lacks it."""
    try:
        return load_model_config(repository, model)
    except ModelNotFoundError:
        from gpu_consumer.export import PREPARERS

        if model not in PREPARERS:
            raise
        log(f"model {model} is not in {repository}; preparing it (once)...")
        return PREPARERS[model](repository)


def watch_job(
    settings: KafkaSettings,
    topics: Topics,
    job_id: str,
    total: int,
    *,
    on_progress: ProgressCallback | None = None,
    check: Callable[[], None] = lambda: None,
    every_s: float = 1.0,
    timeout_s: float | None = None,
) -> tuple[JobOutcome, float]:
    """Follow results and dead letters until every record of the job has one; (outcome, seconds).

    TimeoutError after timeout_s without the job completing."""
    outcome = JobOutcome(job_id)
    started = time.monotonic()
    progress = Progress(total, started)
    last_report = 0.0
    with TopicFollower(settings, [topics.results, topics.dead_letters]) as follower:
        while outcome.done < total:
            outcome.add(follower.poll(0.2), topics)
            check()
            now = time.monotonic()
            if timeout_s is not None and now - started > timeout_s:
                raise TimeoutError(f"job {job_id}: {outcome.done} of {total} records done after {timeout_s:.0f} s")
            if on_progress and (now - last_report >= every_s or outcome.done >= total):
                progress.done, progress.failed = outcome.done, len(outcome.dead)
                on_progress(progress)
                last_report = now
    return outcome, time.monotonic() - started


def summarize(outcome: JobOutcome, seconds: float) -> Summary:
    sizes = {r.batch_id: r.batch_size for r in outcome.results.values()}
    mean = sum(sizes.values()) / len(sizes) if sizes else 0.0
    return Summary(len(outcome.results), len(outcome.dead), seconds, len(sizes), mean)


def run_job(
    source: JobInput,
    model: str,
    *,
    repository: Path,
    bootstrap_servers: str = "",
    namespace: str = "",
    job_id: str | None = None,
    skip_invalid: bool = False,
    worker_args: tuple[str, ...] = (),
    log: Callable[[str], None] = print,
    on_progress: ProgressCallback | None = None,
) -> RunResult:
    """Validate, start what is missing (broker, workers), submit, follow to the end, stop what we started."""
    validated = source.validate()
    if validated[1] and not skip_invalid:
        raise InvalidInputError(validated[1])
    topics = Topics(namespace)
    with ExitStack() as stack:
        workers: list[WorkerProcess] = []
        if bootstrap_servers:
            settings = KafkaSettings.from_env(bootstrap_servers)
        else:
            ensure_model(repository, model, log)
            workdir = Path(tempfile.mkdtemp(prefix="nearline-run-"))
            broker = EmbeddedBroker.start(workdir / "broker.log")
            stack.callback(broker.stop)
            settings = KafkaSettings(broker.bootstrap_servers)
            ensure_topics(settings, pipeline_topics(topics, model))
            workers = start_pipeline_workers(
                model,
                bootstrap_servers=broker.bootstrap_servers,
                namespace=namespace,
                repository=repository,
                logs=workdir,
                # the embedded broker is ours: this GPU worker is alone, so it skips the group join
                gpu_args=("--sole-consumer", *worker_args),
            )
            stack.callback(stop_all, workers)
            log(f"embedded broker on {broker.bootstrap_servers}; worker logs in {workdir}")

        def check() -> None:
            for w in workers:
                w.check_alive()

        report = submit(settings, topics, source, model, job_id=job_id, skip_invalid=skip_invalid, validated=validated)
        log(f"submitted {report.submitted} records as job {report.job_id}")
        outcome, seconds = watch_job(
            settings, topics, report.job_id, report.submitted, on_progress=on_progress, check=check
        )
        if not bootstrap_servers:
            stop_all(workers)
            shutil.rmtree(workdir, ignore_errors=True)  # logs are kept only when something failed
    return RunResult(report, outcome, summarize(outcome, seconds))
