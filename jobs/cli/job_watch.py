"""The commands that watch and steer submitted jobs: jobs list, status and cancel."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import click

from jobs.cli.options import cluster_options, label_option
from jobs.cli.progress_display import ProgressDisplay
from jobs.cli.validators import require_servers
from jobs.exit_codes import ExitCode
from jobs.progress import Progress, format_eta
from kafka_io.topology import Topics

if TYPE_CHECKING:
    from jobs.registry import JobStatus


@click.group(name="jobs")
def jobs_group() -> None:
    """The job registry (topic jobs)."""


@jobs_group.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of the objects `status --json` prints.")
@label_option
@cluster_options
def jobs_list(as_json: bool, labels: dict[str, str], bootstrap_servers: str, namespace: str) -> None:
    """Every registered job with its state and progress, oldest first; with --label, only the jobs
    that carry every label given."""
    import json

    from jobs.notifications.status import notifications_for
    from jobs.registry import format_labels, job_statuses

    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    statuses = job_statuses(settings, topics, labels)
    if as_json:
        told = notifications_for(settings, topics, [status.job for status in statuses])
        rows = [{**shown_status(status), "notification": told[status.job.job_id]} for status in statuses]
        click.echo(json.dumps(rows, indent=2))
        return
    if not statuses:  # said where a person reads it; stdout stays one line per job
        having = f" labelled {format_labels(labels)}" if labels else ""
        click.echo(f"no jobs{having} in {topics.jobs}", err=True)
    for status in statuses:
        job = status.job
        schedule = f"\tschedule {job.schedule}" if job.schedule else ""
        lane = "\tlive" if job.priority == "live" else ""
        left = status.deadline_news()
        deadline = "" if left is None else f"\texpires in {format_eta(left)}" if left else "\tdeadline passed"
        tags = f"\t{format_labels(job.terms.labels)}" if job.terms.labels else ""
        generated = status.outcome.usage.completion_tokens if status.outcome.usage is not None else 0
        tokens = f" ({generated:,} tokens)" if generated else ""
        click.echo(
            f"{job.job_id}\t{job.model}\t{status.state.value}\t{status.done}/{job.total}{tokens}"
            f"{lane}{deadline}{schedule}{tags}"
        )


@click.command(name="status")
@click.argument("job_id")
@click.option("--watch", is_flag=True, help="Refresh until the job ends, with rate and ETA.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object; with --watch, one per refresh (JSON Lines).")
@cluster_options
def status_cmd(job_id: str, watch: bool, as_json: bool, bootstrap_servers: str, namespace: str) -> None:
    """A job's state and per-stage counts (submitted, preprocessed, inferred, dead-lettered)."""
    import json

    from jobs.notifications.status import notification_for
    from jobs.registry import job_status, watch_status

    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    if not watch:
        status = job_status(settings, topics, job_id)
        notification = notification_for(settings, topics, status.job)
        if as_json:
            click.echo(json.dumps({**shown_status(status), "notification": notification}))
            return
        click.echo(status.line())
        if status.outcome.usage is not None and status.outcome.usage.records:
            click.echo(f"  usage: {status.outcome.usage.text(status.job.kind)}")
        if notification is not None:
            click.echo(f"  webhook: {notification_line(notification)}")
        return
    display = ProgressDisplay(every_s=0)  # watch_status paces the updates
    if as_json or not (display.tty and sys.stdout.isatty()):
        for status, progress in watch_status(settings, topics, job_id):
            click.echo(json.dumps(shown_status(status, progress)) if as_json else status.line(progress))
        return
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


def shown_status(status: JobStatus, progress: Progress | None = None) -> dict[str, Any]:
    """The job's status document as `status --json` and `jobs list --json` show it: its --notify URL
    without the password or token it may hold (shown_url), as anyone who may read the jobs topic reads it."""
    from jobs.notifications.delivery import shown_url

    document = status.to_dict(progress)
    if document["notify"]:
        document["notify"] = shown_url(document["notify"])
    return document


def notification_line(notification: dict[str, Any]) -> str:
    """How `status` tells a webhook's delivery: pending, delivered, failing (why) or given up."""
    state, url, attempts = notification["state"], notification["url"], notification["attempts"]
    if state == "delivered":
        return f"delivered to {url} at {notification['delivered_at']} (attempt {attempts})"
    if state == "pending":
        return f"{url}: told when the job ends (by `nearline worker notifier`)"
    why = notification["last_error"] or f"HTTP {notification['http_status']}"
    ended = "gave up" if state == "gave_up" else "failing, retried"
    return f"{url}: {ended} after {attempts} attempt{'s' if attempts != 1 else ''}: {why}"


@click.command(name="cancel")
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
