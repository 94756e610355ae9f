"""`nearline schedule add|list|pause|resume|rm`: recurring jobs, stored in the `schedules` topic.

The jobs themselves are submitted by `nearline worker scheduler` (jobs/scheduling/scheduler.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from jobs.cli.columns import column_options
from jobs.cli.options import cluster_options, priority_option, terms_options
from jobs.cli.validators import require_servers
from jobs.scheduling.cron import MISFIRE_POLICIES, next_tick
from jobs.scheduling.schedules import (
    ScheduleSpec,
    add_schedule,
    describe,
    new_schedule,
    remove_schedule,
    set_paused,
    unserved_model,
)
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from producers.table_rows import Columns
from schemas import JobTerms

T = TypeVar("T")


@click.group(name="schedule")
def schedule() -> None:
    """Recurring jobs: a cron spec, an input path or glob, a model. Run `nearline worker scheduler`."""


@schedule.command(name="add")
@click.argument("name")
@click.option("--cron", required=True, help='Five-field cron expression, e.g. "0 3 * * *" for 03:00 daily.')
@click.option("--input", "input_pattern", required=True, help="Path or glob, expanded at each tick (quote globs).")
@click.option("--model", "-m", required=True)
@click.option("--timezone", default="UTC", help="IANA zone the cron expression is read in.")
@click.option(
    "--misfire",
    type=click.Choice(MISFIRE_POLICIES),
    default="skip",
    help="Ticks missed while no scheduler ran: skip them, or run each late (catch-up).",
)
@click.option("--replace", "replace_existing", is_flag=True, help="Overwrite a schedule of the same name.")
@column_options
@priority_option
@terms_options
@cluster_options
def schedule_add(
    name: str,
    cron: str,
    input_pattern: str,
    model: str,
    timezone: str,
    misfire: str,
    replace_existing: bool,
    columns: Columns,
    priority: str,
    terms: JobTerms,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Add a schedule; it runs from its next tick on. Its --label, --complete-within (counted from
    each job's submission) and --notify go on every job it submits."""
    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    spec = ScheduleSpec(name, cron, input_pattern, model, timezone, misfire, columns, priority, terms)  # type: ignore[arg-type]
    created = new_schedule(spec)
    add_schedule(settings, topics, created, replace_existing)
    first = next_tick(created.cron, created.timezone, datetime.now(UTC))
    click.echo(f"schedule {name} added; next tick {first:%Y-%m-%d %H:%M %Z}", err=True)
    unserved = unserved_model(settings, topics, model)
    if unserved:
        click.echo(f"note: {unserved}", err=True)


@schedule.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array, an object per schedule.")
@cluster_options
def schedule_list(as_json: bool, bootstrap_servers: str, namespace: str) -> None:
    """Every schedule with its state, next tick and last job."""
    from jobs.notifications.delivery import shown_url
    from jobs.printable import shown

    topics = Topics(namespace)
    rows: list[dict[str, Any]] = [
        view.to_dict() for view in describe(require_servers(bootstrap_servers), topics, datetime.now(UTC))
    ]
    for row in rows:  # its jobs' URL as status shows it: without the password or token it may hold
        row["notify"] = shown_url(row["notify"]) if row["notify"] else row["notify"]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:  # said where a person reads it; stdout stays one line per schedule
        click.echo(f"no schedules in {topics.schedules}", err=True)
    for row in rows:
        # the input is any path its adder typed, shown on other people's terminals: escaped (shown)
        click.echo(
            f"{row['name']}\t{row['cron']} ({row['timezone']})\t{row['state']}\t"
            f"next {row['next_tick'] or '-'}\tlast job {row['last_job_id'] or '-'}\t"
            f"{row['model']}\t{shown(row['input'])}"
        )


def _named_command(
    verb: str, done: str, help_text: str, action: Callable[[KafkaSettings, Topics, str], object]
) -> None:
    """`nearline schedule VERB NAME`: one action on one schedule, reported as `schedule NAME DONE`."""

    @schedule.command(name=verb, help=help_text)
    @click.argument("name")
    @cluster_options
    def command(name: str, bootstrap_servers: str, namespace: str) -> None:
        settings, topics = require_servers(bootstrap_servers), Topics(namespace)
        action(settings, topics, name)
        click.echo(f"schedule {name} {done}", err=True)


_named_command(
    "pause", "paused", "Stop submitting jobs for NAME until resumed.", lambda st, t, n: set_paused(st, t, n, True)
)
_named_command(
    "resume",
    "resumed",
    "Resume NAME from its next tick; ticks that fell while paused do not run.",
    lambda st, t, n: set_paused(st, t, n, False),
)
_named_command("rm", "removed", "Remove NAME. Jobs it already submitted stay.", remove_schedule)
