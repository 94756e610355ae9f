"""The root `nearline` group and the job commands: run, submit, status, jobs, cancel, results,
profile, report, produce. Every option is also an environment variable (shown in --help)."""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path

import click

from jobs.cli import ops, workers
from jobs.cli.columns import column_options
from jobs.cli.group import NearlineGroup
from jobs.cli.options import (
    batch_args,
    batch_options,
    cluster_options,
    format_option,
    output_options,
    priority_option,
    repository_option,
    wait_options,
)
from jobs.cli.progress_display import ProgressDisplay
from jobs.cli.validators import checked_job_id, checked_output, opened_input, require_servers
from jobs.exit_codes import ExitCode
from jobs.output import OutputFormat
from jobs.submit import SubmitReport, submit
from kafka_io.settings import Priority, Topics
from producers.table_rows import DEFAULT_COLUMNS, Columns


@click.group(
    cls=NearlineGroup,
    context_settings={"auto_envvar_prefix": "NEARLINE", "show_default": True},
    # croniter (and the pytz it imports) belong to schedules only: workers must start without them
    lazy={"schedule": "jobs.cli.schedule:schedule"},
)
@click.option(
    "--log-level",
    default="WARNING",
    show_envvar=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def cli(log_level: str) -> None:
    """nearline: durable near-line batch inference over Kafka."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@cli.command()
@click.argument("input_path", metavar="INPUT")
@click.option("--model", "-m", required=True, show_envvar=True, help="Model name in the model repository.")
@output_options
@click.option("--job-id", default=None, callback=checked_job_id, help="Job id [default: generated].")
@click.option("--skip-invalid", is_flag=True, help="Submit the valid records and list the invalid ones.")
@wait_options
@format_option
@column_options
@batch_options
@priority_option
@cluster_options
@repository_option
def run(
    input_path: str,
    model: str,
    output: Path | None,
    output_format: str | None,
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
    priority: Priority,
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
    from jobs.cli.run_output import write_run_output
    from jobs.launch.runner import run_job
    from jobs.launch.signals import Terminated, terminate_like_interrupt

    out_format = checked_output(output, output_format)
    if output is not None and output.exists() and Path(input_path).exists() and output.samefile(input_path):
        raise click.BadParameter(f"{output} is the input: the results would replace it", param_hint="'--output' / '-o'")
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
            result = run_job(
                opened_input(input_path, fmt, kind, max_image_bytes, follow_symlinks, columns),
                model,
                repository=model_repository,
                bootstrap_servers=bootstrap_servers,
                namespace=namespace,
                job_id=job_id,
                skip_invalid=skip_invalid,
                worker_args=tuple(worker_args),
                log=display.echo,
                on_progress=display,
                timeout_s=timeout,
                worker_grace_s=worker_grace,
                priority=priority,
            )
    except Terminated as exc:
        display.close()
        click.echo(f"stopped by {exc}; the broker and workers it started were stopped", err=True)
        raise SystemExit(128 + exc.signum) from None
    except KeyboardInterrupt:  # Ctrl-C before the job was submitted (after it: result.failure)
        display.close()
        click.echo("stopped by SIGINT; the broker and workers it started were stopped", err=True)
        raise SystemExit(128 + signal.SIGINT) from None
    display.close()
    for error in result.report.skipped:
        click.echo(f"skipped: {error}", err=True)
    with result.results as spill:
        written = write_run_output(
            spill, output, out_format, run_failed=result.failure is not None, cluster=bool(bootstrap_servers)
        )
    click.echo(result.summary.line(), err=True)
    if written.path is not None:
        unit = "lines" if written.fmt is OutputFormat.JSONL else "rows"
        click.echo(f"wrote {written.count} {unit} to {written.path}", err=True)
    if result.failure is not None:
        click.echo(f"error: {result.failure}", err=True)
        raise SystemExit(result.failure.exit_code)
    if written.failed:
        raise SystemExit(ExitCode.FAILED)
    if result.summary.dead_lettered:
        raise SystemExit(ExitCode.COMPLETED_WITH_ERRORS)


def _submit(
    input_path: str,
    fmt: str,
    kind: str,
    max_image_bytes: int,
    model: str,
    job_id: str | None,
    skip_invalid: bool,
    bootstrap_servers: str,
    namespace: str,
    topic: str | None = None,
    max_backlog: int | None = None,
    follow_symlinks: bool = False,
    columns: Columns = DEFAULT_COLUMNS,
    priority: Priority = "batch",
) -> SubmitReport:
    source = opened_input(input_path, fmt, kind, max_image_bytes, follow_symlinks, columns)
    topics = Topics(namespace)
    if topic is not None and topic != source.raw_topic(topics, priority):
        # any other topic took the records and registered a job that no worker would ever finish
        raise click.BadParameter(
            f"{topic!r}: {source.kind} records go to {source.raw_topic(topics, priority)}, the topic the preprocess "
            f"workers read them from in the {priority} lane (text to {topics.lane(topics.raw_text, priority)}, "
            f"images to {topics.lane(topics.raw_image, priority)}; --priority names the lane)",
            param_hint="'TOPIC'",
        )
    report = submit(
        require_servers(bootstrap_servers),
        topics,
        source,
        model,
        job_id=job_id,
        skip_invalid=skip_invalid,
        topic=topic,
        max_backlog=max_backlog,
        priority=priority,
    )
    for error in report.skipped:
        click.echo(f"skipped: {error}", err=True)
    return report


@cli.command(name="submit")
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
@click.option("--model", "-m", required=True, show_envvar=True)
@click.option(
    "--job-id", default=None, callback=checked_job_id, help="Job id [default: generated]; resubmitting reuses it."
)
@click.option("--skip-invalid", is_flag=True, help="Submit the valid records and list the invalid ones.")
@wait_options
@format_option
@column_options
@priority_option
@cluster_options
def submit_cmd(
    wait: bool,
    max_backlog: int | None,
    input_path: str,
    model: str,
    job_id: str | None,
    skip_invalid: bool,
    timeout: float | None,
    worker_grace: float,
    fmt: str,
    kind: str,
    max_image_bytes: int,
    follow_symlinks: bool,
    columns: Columns,
    priority: Priority,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Submit INPUT as a job to running workers; prints the job id."""
    report = _submit(
        input_path,
        fmt,
        kind,
        max_image_bytes,
        model,
        job_id,
        skip_invalid,
        bootstrap_servers,
        namespace,
        max_backlog=max_backlog,
        follow_symlinks=follow_symlinks,
        columns=columns,
        priority=priority,
    )
    click.echo(f"submitted {report.submitted} record{'' if report.submitted == 1 else 's'}", err=True)
    click.echo(report.job_id)
    if wait:
        from jobs.launch.runner import watch_job, worker_liveness
        from jobs.liveness import JobWaitError

        settings, topics = require_servers(bootstrap_servers), Topics(namespace)
        display = ProgressDisplay()
        try:
            outcome, seconds = watch_job(
                settings,
                topics,
                report.job_id,
                report.submitted,
                on_progress=display,
                watchdog=worker_liveness(settings, topics, model, worker_grace),
                timeout_s=timeout,
                submission=report.submission,
            )
        except JobWaitError as exc:
            display.close()
            # the job stays submitted: workers that come back finish it (nearline status/results)
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(exc.exit_code) from None
        click.echo(f"job {report.job_id} done in {seconds:.1f} s: {len(outcome.dead)} dead-lettered", err=True)
        if outcome.dead:
            raise SystemExit(ExitCode.COMPLETED_WITH_ERRORS)


@cli.group(name="jobs")
def jobs_group() -> None:
    """The job registry (topic jobs)."""


@jobs_group.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of the objects `status --json` prints.")
@cluster_options
def jobs_list(as_json: bool, bootstrap_servers: str, namespace: str) -> None:
    """Every registered job with its state and progress, oldest first."""
    import json

    from jobs.registry import job_statuses

    statuses = job_statuses(require_servers(bootstrap_servers), Topics(namespace))
    if as_json:
        click.echo(json.dumps([status.to_dict() for status in statuses], indent=2))
        return
    for status in statuses:
        schedule = f"\tschedule {status.job.schedule}" if status.job.schedule else ""
        lane = "\tlive" if status.job.priority == "live" else ""
        click.echo(
            f"{status.job.job_id}\t{status.job.model}\t{status.state.value}\t{status.done}/{status.job.total}{lane}{schedule}"
        )


@cli.command(name="status")
@click.argument("job_id")
@click.option("--watch", is_flag=True, help="Refresh until the job ends, with rate and ETA.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object; with --watch, one per refresh (JSON Lines).")
@cluster_options
def status_cmd(job_id: str, watch: bool, as_json: bool, bootstrap_servers: str, namespace: str) -> None:
    """A job's state and per-stage counts (submitted, preprocessed, inferred, dead-lettered)."""
    import json

    from jobs.registry import job_status, watch_status

    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    if not watch:
        status = job_status(settings, topics, job_id)
        click.echo(json.dumps(status.to_dict()) if as_json else status.line())
        return
    display = ProgressDisplay(every_s=0)  # watch_status paces the updates
    if as_json or not (display.tty and sys.stdout.isatty()):
        for status, progress in watch_status(settings, topics, job_id):
            click.echo(json.dumps(status.to_dict(progress)) if as_json else status.line(progress))
        return
    from jobs.progress import Progress

    last = None
    try:
        for status, progress in watch_status(settings, topics, job_id, every_s=0.5):
            last = status, progress
            bar = progress or Progress(status.job.total, time.monotonic(), status.done, baseline=status.done)
            bar.done, bar.failed = status.done, status.counts()["dead_lettered"]
            display(bar, label=f"{job_id} {status.state.value}")
    finally:
        display.close()
    if last is not None:
        click.echo(last[0].line(last[1]))  # the end state, in full


@cli.command(name="cancel")
@click.argument("job_id")
@cluster_options
def cancel_cmd(job_id: str, bootstrap_servers: str, namespace: str) -> None:
    """Cancel a job: workers skip its remaining records (counted as cancelled, not lost).

    A job that has already ended is left as it is: exit 0 if it was cancelled, 1 if it completed
    or failed (nothing was cancelled)."""
    from jobs.registry import JobState, cancel, job_status

    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    status = job_status(settings, topics, job_id)
    if status.state is JobState.CANCELLED:
        click.echo(f"job {job_id} was already cancelled: {status.line()}", err=True)
        return
    if status.state.ended:  # a cancellation would change nothing but say it had
        ended = "completed" if status.state is JobState.COMPLETED_WITH_ERRORS else status.state.value
        click.echo(f"error: job {job_id} had already {ended}, so nothing was cancelled: {status.line()}", err=True)
        raise SystemExit(ExitCode.FAILED)
    cancel(settings, topics, job_id)
    click.echo(f"cancelled {job_id}", err=True)


@cli.command()
@click.argument("job_id")
@output_options
@click.option("--model-version", default=None, help="Only this version's results [default: the newest per record].")
@cluster_options
def results(
    job_id: str,
    output: Path | None,
    output_format: str | None,
    model_version: str | None,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Write a job's results in input order, one per record: JSON Lines, Parquet or Arrow.

    Records wait in a temporary file (under $TMPDIR) between reading and writing, not in memory;
    -o is written to a temporary file renamed into place."""
    from jobs.spill import write_results

    out_format = checked_output(output, output_format)
    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    spill, job = write_results(settings, topics, job_id, output, sys.stdout, out_format, model_version=model_version)
    click.echo(
        f"{spill.results} results, {spill.dead} dead letters"
        + (f" ({spill.duplicates} duplicate copies dropped)" if spill.duplicates else ""),
        err=True,
    )
    if job is not None and model_version is None and spill.done < job.total:
        counts = f"{spill.done} of its {job.total} records have a result or a dead letter (nearline status {job_id})"
        if job.cancelled_at is not None:
            click.echo(f"job {job_id} was cancelled: {counts}", err=True)
        elif job.error:
            click.echo(f"error: job {job_id} failed: {counts}", err=True)
        else:  # what is written is not the job's output yet
            click.echo(f"error: job {job_id} is not complete: {counts}", err=True)
            raise SystemExit(ExitCode.FAILED)
    if spill.done == 0:
        raise SystemExit(ExitCode.FAILED)


@cli.command(name="profile")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@cluster_options
def profile_cmd(job_id: str, as_json: bool, bootstrap_servers: str, namespace: str) -> None:
    """Latency per stage (p50/p95/p99), the bottleneck and the engine busy fraction of a job."""
    import json

    from jobs.registry import JobNotFoundError, find_job
    from jobs.reports.profile import profile
    from jobs.results import read_outcome

    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    outcome = read_outcome(settings, topics, job_id, keep_results=False, keep_timings=True)
    if not outcome.timings:
        click.echo(f"error: no results for job {job_id}", err=True)
        raise SystemExit(ExitCode.FAILED)
    report = profile(outcome.timings)
    try:  # the lane it ran in: live records wait less behind a backfill
        lane: str | None = find_job(settings, topics, job_id).priority
    except JobNotFoundError:  # results of a job no longer (or never) registered
        lane = None
    if as_json:
        click.echo(json.dumps({**report.to_dict(), "lane": lane}, indent=2))
    else:
        click.echo("\n".join([*([f"lane: {lane}"] if lane else []), *report.lines()]))


@cli.command(name="report")
@click.argument("job_id")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="HTML file to write [default: JOB_ID.html].",
)
@cluster_options
def report_cmd(job_id: str, output: Path | None, bootstrap_servers: str, namespace: str) -> None:
    """One self-contained HTML page: throughput over time, latency per stage, batch sizes."""
    from jobs.registry import job_status
    from jobs.reports.report import render

    status = job_status(require_servers(bootstrap_servers), Topics(namespace), job_id, keep_timings=True)
    path = output or Path(f"{job_id}.html")
    path.write_text(render(status), encoding="utf-8")
    click.echo(f"wrote {path} ({status.state.value}, {status.outcome.inferred} results)", err=True)


@cli.command()
@click.argument("topic")
@click.argument("input_path", metavar="FILE|-")
@click.option("--model", "-m", required=True, show_envvar=True, help="Model the records are addressed to.")
@click.option("--job-id", default=None, callback=checked_job_id)
@click.option("--skip-invalid", is_flag=True)
@format_option
@column_options
@priority_option
@cluster_options
def produce(
    topic: str,
    input_path: str,
    model: str,
    job_id: str | None,
    skip_invalid: bool,
    fmt: str,
    kind: str,
    max_image_bytes: int,
    follow_symlinks: bool,
    columns: Columns,
    priority: Priority,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Produce raw text or image records from a file, folder or stdin to TOPIC, the raw topic of
    their kind (raw.text or raw.image, with the namespace's prefix) in the lane --priority names
    (the live lane's twins are live.raw.text and live.raw.image)."""
    report = _submit(
        input_path,
        fmt,
        kind,
        max_image_bytes,
        model,
        job_id,
        skip_invalid,
        bootstrap_servers,
        namespace,
        topic,
        follow_symlinks=follow_symlinks,
        columns=columns,
        priority=priority,
    )
    click.echo(f"produced {report.submitted} records to {topic} as job {report.job_id} ({priority} lane)", err=True)


# The other command modules define their commands standalone; the root group gathers them here.
for _command in (
    workers.worker,
    workers.broker,
    workers.models,
    ops.reprocess_cmd,
    ops.replay_cmd,
    ops.offsets,
    ops.dlq,
):
    cli.add_command(_command)


def main() -> None:
    cli()
