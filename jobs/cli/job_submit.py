"""The commands that send a job's records: run (with its own broker and workers, or a cluster's),
submit (to running workers) and produce (to a named raw topic)."""

from __future__ import annotations

import functools
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from jobs.cli.columns import column_options
from jobs.cli.options import (
    NO_REUSE_HELP,
    batch_args,
    batch_options,
    cluster_options,
    errors_option,
    format_option,
    label_option,
    output_options,
    priority_option,
    repository_option,
    terms_options,
    wait_options,
)
from jobs.cli.progress_display import ProgressDisplay
from jobs.cli.validators import (
    check_errors_path,
    checked_job_id,
    checked_output,
    job_model,
    opened_input,
    require_servers,
)
from jobs.exit_codes import ExitCode
from jobs.job_input import JobInput
from jobs.submit import JobSettings, SubmitReport, submit
from kafka_io.topology import Lane, Topics
from producers.table_rows import Columns
from results.formats import OutputFormat
from results.output import leads_to_input
from schemas import JobTerms

if TYPE_CHECKING:
    from jobs.launch.runner import RunResult


@click.command()
@click.argument("input_path", metavar="INPUT")
@click.option(
    "--model",
    "-m",
    default=None,
    show_envvar=True,
    help="Model name in the model repository (an OpenAI batch file's body.model by default).",
)
@output_options
@errors_option
@click.option("--job-id", default=None, callback=checked_job_id, help="Job id [default: generated].")
@click.option("--skip-invalid", is_flag=True, help="Submit the valid records and list the invalid ones.")
@wait_options
@format_option
@column_options
@batch_options
@priority_option
@terms_options
@cluster_options
@repository_option
def run(
    input_path: str,
    model: str | None,
    output: Path | None,
    output_format: str | None,
    errors: Path | None,
    job_id: str | None,
    skip_invalid: bool,
    timeout: float | None,
    worker_grace: float,
    fmt: str,
    kind: str,
    max_image_bytes: int,
    follow_symlinks: bool,
    columns: Columns,
    max_batch_size: int | None,
    max_batch_tokens: int | None,
    max_window: int | None,
    max_linger_ms: float,
    priority: Lane,
    terms: JobTerms,
    bootstrap_servers: str,
    namespace: str,
    model_repository: Path,
) -> None:
    """Run INPUT through the pipeline and write one result per record, in input order.

    With no cluster named, starts the embedded broker and a preprocess and a GPU worker, and
    stops them at the end. With --bootstrap-servers, uses that cluster and its running workers.

    \b
    Example:
      nearline run producers/examples/python-docs-paragraphs.jsonl --model minilm -o results.jsonl
      nearline run reviews.parquet --text-column body --keep-columns stars,date -m minilm -o out.parquet
    """
    from jobs.launch.runner import RunSettings, run_job
    from jobs.launch.signals import Terminated, terminate_like_interrupt

    out_format = _checked_run_options(input_path, output, output_format, errors, terms, bootstrap_servers)
    worker_args = batch_args(
        max_batch_size=max_batch_size,
        max_batch_tokens=max_batch_tokens,
        max_window=max_window,
        max_linger_ms=max_linger_ms,
    )
    display = ProgressDisplay()
    try:
        # SIGTERM/SIGHUP (a closed terminal, a CI timeout) stop the broker and workers as Ctrl-C does
        with terminate_like_interrupt():
            run_settings = RunSettings(
                model_repository,
                bootstrap_servers,
                namespace,
                job_id,
                skip_invalid,
                tuple(worker_args),
                timeout_s=timeout,
                worker_grace_s=worker_grace,
                priority=priority,
                terms=terms,
            )
            source = opened_input(input_path, fmt, kind, max_image_bytes, follow_symlinks, columns)
            result = run_job(source, job_model(model, source), run_settings, display.echo, display)
    except Terminated as exc:
        display.close()
        click.echo(f"stopped by {exc}; the broker and workers it started were stopped", err=True)
        raise SystemExit(128 + exc.signum) from None
    except KeyboardInterrupt:  # Ctrl-C before the job was submitted (after it: result.failure)
        display.close()
        click.echo("stopped by SIGINT; the broker and workers it started were stopped", err=True)
        raise SystemExit(128 + signal.SIGINT) from None
    display.close()
    _finish_run(result, source, output, out_format, errors, cluster=bool(bootstrap_servers))


def _checked_run_options(
    input_path: str,
    output: Path | None,
    output_format: str | None,
    errors: Path | None,
    terms: JobTerms,
    bootstrap_servers: str,
) -> OutputFormat:
    """-o's format, once -o and --errors are known not to replace the input or each other, and
    --notify to have a notifier to tell the URL."""
    out_format = checked_output(output, output_format)
    if leads_to_input(output, input_path):
        raise click.BadParameter(f"{output} is the input: the results would replace it", param_hint="'--output' / '-o'")
    check_errors_path(errors, ("-o", output), ("the input", input_path))
    if terms.notify and not bootstrap_servers:  # its broker and workers are gone when it returns
        raise click.BadParameter(
            "nearline run on its own broker ends with the job, and no notifier could tell the URL: "
            "name a cluster (--bootstrap-servers) where `nearline worker notifier` runs",
            param_hint="'--notify'",
        )
    return out_format


def _finish_run(
    result: RunResult,
    source: JobInput,
    output: Path | None,
    out_format: OutputFormat,
    errors: Path | None,
    *,
    cluster: bool,
) -> None:
    """Write a finished run's results and errors, say what it did, and exit as it ended."""
    from jobs.cli.run_output import write_run_files

    for error in result.report.skipped:
        click.echo(f"skipped: {error}", err=True)
    with result.results as spill:
        written = write_run_files(
            spill, source, output, out_format, errors, result.failure, cluster, result.report.skipped
        )
    click.echo(result.summary.line(), err=True)
    if written.path is not None:
        unit = "rows" if written.fmt.binary else "lines"
        click.echo(f"wrote {written.count} {unit} to {written.path}", err=True)
    if result.failure is not None:
        click.echo(f"error: {result.failure}", err=True)
        raise SystemExit(result.failure.exit_code)
    if written.failed:
        raise SystemExit(ExitCode.FAILED)
    if result.summary.dead_lettered:
        raise SystemExit(ExitCode.COMPLETED_WITH_ERRORS)


@dataclass(frozen=True)
class Submission:
    """What `submit` and `produce` send: INPUT's records, read as its options say, as job `job_id`
    of `model` in the `priority` lane of a cluster's namespace."""

    source: JobInput
    model: str
    job_id: str | None
    skip_invalid: bool
    priority: Lane
    bootstrap_servers: str
    namespace: str
    terms: JobTerms = field(default_factory=JobTerms)


def as_submission(f: Callable[..., Any]) -> Callable[..., Any]:
    """INPUT, its reading options, --model, --job-id, --skip-invalid, --priority, the job's terms
    (`terms`, or `labels` alone) and the cluster as one `job` argument. The options stay on each
    command, which gives them its own help."""

    @functools.wraps(f)
    def wrapper(
        *args: Any,
        input_path: str,
        fmt: str,
        kind: str,
        max_image_bytes: int,
        follow_symlinks: bool,
        columns: Columns,
        model: str | None,
        job_id: str | None,
        skip_invalid: bool,
        priority: Lane,
        bootstrap_servers: str,
        namespace: str,
        terms: JobTerms | None = None,
        labels: dict[str, str] | None = None,
        no_reuse: bool = False,
        **kwargs: Any,
    ) -> Any:
        source = opened_input(input_path, fmt, kind, max_image_bytes, follow_symlinks, columns)
        job = Submission(
            source=source,
            model=job_model(model, source),
            job_id=job_id,
            skip_invalid=skip_invalid,
            priority=priority,
            bootstrap_servers=bootstrap_servers,
            namespace=namespace,
            terms=terms or JobTerms(labels or {}, reuse=not no_reuse),
        )
        return f(*args, job=job, **kwargs)

    return wrapper


def _submit(job: Submission, *, topic: str | None = None, max_backlog: int | None = None) -> SubmitReport:
    """Send `job`'s records, to `topic` if named (it must be the raw topic of their kind and lane)."""
    source, priority = job.source, job.priority
    topics = Topics(job.namespace)
    if topic is not None and topic != source.raw_topic(topics, priority):
        # any other topic took the records and registered a job that no worker would ever finish
        raise click.BadParameter(
            f"{topic!r}: {source.kind} records go to {source.raw_topic(topics, priority)}, the topic the preprocess "
            f"workers read them from in the {priority} lane (text to {topics.lane(topics.raw_text, priority)}, "
            f"images to {topics.lane(topics.raw_image, priority)}; --priority names the lane)",
            param_hint="'TOPIC'",
        )
    report = submit(
        require_servers(job.bootstrap_servers),
        topics,
        source,
        job.model,
        JobSettings(job.job_id, job.skip_invalid, topic, max_backlog, priority=priority, terms=job.terms),
    )
    for error in report.skipped:
        click.echo(f"skipped: {error}", err=True)
    return report


@click.command(name="submit")
@click.option("--wait", is_flag=True, help="Return when the job completes: exit 0, or 4 if some records dead-lettered.")
@click.option(
    "--max-backlog",
    type=click.IntRange(min=1),  # 0 refused every job, with advice to split it into jobs of 0 records
    default=None,
    envvar="NEARLINE_MAX_BACKLOG",
    show_envvar=True,
    help="Refuse (exit 5) a job that would leave more records than this waiting in the pipeline.",
)
@click.argument("input_path", metavar="INPUT")
@click.option(
    "--model", "-m", default=None, show_envvar=True, help="Model name [default: an OpenAI batch file's body.model]."
)
@click.option(
    "--job-id", default=None, callback=checked_job_id, help="Job id [default: generated]; resubmitting reuses it."
)
@click.option("--skip-invalid", is_flag=True, help="Submit the valid records and list the invalid ones.")
@wait_options
@format_option
@column_options
@priority_option
@terms_options
@cluster_options
@as_submission
def submit_cmd(
    wait: bool, max_backlog: int | None, timeout: float | None, worker_grace: float, job: Submission
) -> None:
    """Submit INPUT as a job to running workers; prints the job id."""
    report = _submit(job, max_backlog=max_backlog)
    click.echo(f"submitted {report.submitted} record{'' if report.submitted == 1 else 's'}", err=True)
    click.echo(report.job_id)
    if job.source.openai_batch:  # body.model is often a hosted model's name no worker here serves
        from jobs.scheduling.schedules import unserved_model

        unserved = unserved_model(require_servers(job.bootstrap_servers), Topics(job.namespace), job.model)
        if unserved:
            click.echo(f"note: {unserved}", err=True)
    if wait:
        from jobs.launch.runner import WaitRules, all_of, watch_job, worker_liveness
        from jobs.liveness import JobCancelledError, JobWaitError
        from jobs.registry import CancelWatch

        settings, topics = require_servers(job.bootstrap_servers), Topics(job.namespace)
        display = ProgressDisplay()
        try:
            with CancelWatch(settings, topics, report.job_id, report.submission) as cancelled:
                outcome, seconds = watch_job(
                    settings,
                    topics,
                    report.job_id,
                    report.submitted,
                    WaitRules(
                        on_progress=display,
                        watchdog=all_of(cancelled, worker_liveness(settings, topics, job.model, worker_grace)),
                        timeout_s=timeout,
                    ),
                    submission=report.submission,
                    keep_results=False,
                )
        except JobWaitError as exc:
            display.close()
            # the job stays submitted: workers that come back finish it (nearline status/results)
            click.echo(str(exc) if isinstance(exc, JobCancelledError) else f"error: {exc}", err=True)
            raise SystemExit(exc.exit_code) from None
        click.echo(f"job {report.job_id} done in {seconds:.1f} s: {len(outcome.dead)} dead-lettered", err=True)
        if outcome.dead:
            raise SystemExit(ExitCode.COMPLETED_WITH_ERRORS)


@click.command()
@click.argument("topic")
@click.argument("input_path", metavar="FILE|-")
@click.option(
    "--model",
    "-m",
    default=None,
    show_envvar=True,
    help="Model the records are addressed to [default: an OpenAI batch file's body.model].",
)
@click.option("--job-id", default=None, callback=checked_job_id)
@click.option("--skip-invalid", is_flag=True)
@format_option
@column_options
@priority_option
@label_option
@click.option("--no-reuse", is_flag=True, help=NO_REUSE_HELP)
@cluster_options
@as_submission
def produce(topic: str, job: Submission) -> None:
    """Produce raw text or image records from a file, folder or stdin to TOPIC, the raw topic of
    their kind (raw.text or raw.image, with the namespace's prefix) in the lane --priority names
    (the live lane's twins are live.raw.text and live.raw.image)."""
    report = _submit(job, topic=topic)
    click.echo(f"produced {report.submitted} records to {topic} as job {report.job_id} ({job.priority} lane)", err=True)
