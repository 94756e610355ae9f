"""The commands that read what a job produced: results, profile (latency per stage) and report
(an HTML page)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from jobs.cli.options import cluster_options, errors_option, output_options
from jobs.cli.validators import check_errors_path, checked_output, require_servers
from jobs.exit_codes import ExitCode
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics

if TYPE_CHECKING:
    from results.spill import ResultSpill
    from results.submitted import Submitted
    from schemas import Job


@click.command()
@click.argument("job_id")
@output_options
@errors_option
@click.option("--model-version", default=None, help="Only this version's results [default: the newest per record].")
@cluster_options
def results(
    job_id: str,
    output: Path | None,
    output_format: str | None,
    errors: Path | None,
    model_version: str | None,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Write a job's results in input order, one per record: JSON Lines, Parquet or Arrow (or, for
    an OpenAI batch file's job, one line per request in OpenAI's batch output shape).

    Records wait in a temporary file (under $TMPDIR) between reading and writing, not in memory;
    -o is written to a temporary file renamed into place."""
    from jobs.registry import load_jobs
    from results.error_file import missing_reason
    from results.formats import OUTPUTS, write_error_file
    from results.job_output import JobOutput
    from results.spill import read_results

    out_format = checked_output(output, output_format)
    check_errors_path(errors, ("-o", output))
    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    job = load_jobs(settings, topics).get(job_id)
    spill = read_results(settings, topics, job_id, job, model_version=model_version)
    with spill:
        shape = OUTPUTS[out_format]
        written = JobOutput(spill, lambda: _submitted(settings, topics, job_id, job, spill))
        count = shape.write(written, output, sys.stdout)
        if shape.unit != "records":  # the summary below counts records
            click.echo(f"wrote {count} {shape.unit}", err=True)
        if errors is not None:
            lines = write_error_file(written, out_format, errors, missing_reason(job))
            click.echo(f"wrote {lines} error lines to {errors}", err=True)
    click.echo(
        f"{spill.results} results, {spill.dead} dead letters"
        + (f" ({spill.duplicates} duplicate copies dropped)" if spill.duplicates else ""),
        err=True,
    )
    if job is not None and model_version is None and spill.done < job.total:
        counts = f"{spill.done} of its {job.total} records have a result or a dead letter (nearline status {job_id})"
        if job.cancelled_at is not None:
            click.echo(f"job {job_id} was cancelled: {counts}", err=True)
        elif job.past_deadline():
            click.echo(f"job {job_id} expired (--complete-within): {counts}", err=True)
        elif job.error:
            click.echo(f"error: job {job_id} failed: {counts}", err=True)
        else:  # what is written is not the job's output yet
            click.echo(f"error: job {job_id} is not complete: {counts}", err=True)
            raise SystemExit(ExitCode.FAILED)
    if spill.done == 0:
        raise SystemExit(ExitCode.FAILED)


def _submitted(
    settings: KafkaSettings, topics: Topics, job_id: str, job: Job | None, spill: ResultSpill
) -> list[Submitted]:
    """The job's submitted records, for a format or an error file that lists them: from its raw
    topic, else (retention, or a job never registered) as far as its results and dead letters tell."""
    from jobs.job_records import submitted_from_topic
    from results.submitted import submitted_from_outcomes

    submitted = submitted_from_topic(settings, topics, job) if job is not None else []
    if not submitted:
        where = f"{topics.jobs} has no job {job_id}" if job is None else "its raw topic no longer holds them"
        click.echo(
            f"note: the job's records are not known ({where}): only records with a result or a dead letter "
            "are written, and none as missing",
            err=True,
        )
        submitted = submitted_from_outcomes(spill.ordered())
    return submitted


@click.command(name="profile")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@cluster_options
def profile_cmd(job_id: str, as_json: bool, bootstrap_servers: str, namespace: str) -> None:
    """Latency per stage (p50/p95/p99), the bottleneck and the engine busy fraction of a job."""
    import json

    from jobs.registry import JobNotFoundError, find_job
    from jobs.reports.profile import profile
    from results.outcome import read_outcome

    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    try:
        job: Job | None = find_job(settings, topics, job_id)
    except JobNotFoundError:  # results of a job no longer (or never) registered: all of them
        job = None
    # a job id submitted again is profiled by its latest submission, the one status and results count
    submission = job.submission if job is not None else None
    outcome = read_outcome(settings, topics, job_id, keep_results=False, keep_timings=True, submission=submission)
    if not outcome.timings:
        click.echo(f"error: no results for job {job_id}", err=True)
        raise SystemExit(ExitCode.FAILED)
    report = profile(outcome.timings)
    lane = job.priority if job is not None else None  # live records wait less behind a backfill
    if as_json:
        click.echo(json.dumps({**report.to_dict(), "lane": lane}, indent=2))
    else:
        click.echo("\n".join([*([f"lane: {lane}"] if lane else []), *report.lines()]))


@click.command(name="report")
@click.argument("job_id")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="HTML file to write; - or /dev/stdout: standard output [default: JOB_ID.html].",
)
@cluster_options
def report_cmd(job_id: str, output: Path | None, bootstrap_servers: str, namespace: str) -> None:
    """One self-contained HTML page: throughput over time, latency per stage, executed batch sizes."""
    from jobs.registry import job_status
    from jobs.reports.report import render
    from results.output import OutputPathError, check_output_path, names_stdout, write_file

    path = output or Path(f"{job_id}.html")
    try:
        check_output_path(path)
    except OutputPathError as exc:
        raise click.BadParameter(str(exc), param_hint="'--output' / '-o'") from None
    status = job_status(require_servers(bootstrap_servers), Topics(namespace), job_id, keep_timings=True)
    page = render(status).encode()
    write_file(path, lambda f: f.write(page), binary=True)
    where = "standard output" if names_stdout(path) else path
    click.echo(f"wrote {where} ({status.state.value}, {status.outcome.inferred} results)", err=True)
