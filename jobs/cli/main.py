"""The root `nearline` group, which gathers the commands of the modules beside it. Every option
is also an environment variable (shown in --help)."""

from __future__ import annotations

import faulthandler
import logging
import signal

import click

from jobs.cli import job_results, job_submit, job_watch, ops, workers
from jobs.cli.group import NearlineGroup
from jobs.job_input import pack_limits_from_env


@click.group(
    cls=NearlineGroup,
    context_settings={"auto_envvar_prefix": "NEARLINE", "show_default": True},
    # croniter (and the pytz it imports) belong to schedules only: workers must start without them
    lazy={"schedule": "jobs.cli.schedule:schedule"},
)
@click.version_option(package_name="nearline", prog_name="nearline")
@click.option(
    "--log-level",
    default="WARNING",
    show_envvar=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def cli(log_level: str) -> None:
    """nearline: durable near-line batch inference over Kafka."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # `kill -USR1 PID` writes every thread's stack to stderr (a worker's log): what a process that
    # stalled is doing, without stopping it (bench.system_cost asks so when a job stops moving)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        pack_limits_from_env()  # a bad $NEARLINE_PACK_* is said before any command reads input
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


# The command modules define their commands standalone; the root group gathers them here.
for _command in (
    job_submit.run,
    job_submit.submit_cmd,
    job_watch.jobs_group,
    job_watch.status_cmd,
    job_watch.cancel_cmd,
    job_results.results,
    job_results.profile_cmd,
    job_results.report_cmd,
    job_submit.produce,
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
