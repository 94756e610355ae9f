"""The root `nearline` group, which gathers the commands of the modules beside it. Every option
is also an environment variable (shown in --help)."""

from __future__ import annotations

import contextlib
import faulthandler
import io
import logging
import signal

import click

from jobs.cli.group import NearlineGroup
from jobs.job_input import pack_limits_from_env
from runtime.heap import settle_heap, settle_heaps_here

# The command modules define their commands standalone; the root group gathers them here, by name.
COMMANDS = {
    "run": "jobs.cli.job_submit:run",
    "submit": "jobs.cli.job_submit:submit_cmd",
    "produce": "jobs.cli.job_submit:produce",
    "jobs": "jobs.cli.job_watch:jobs_group",
    "status": "jobs.cli.job_watch:status_cmd",
    "cancel": "jobs.cli.job_watch:cancel_cmd",
    "results": "jobs.cli.job_results:results",
    "profile": "jobs.cli.job_results:profile_cmd",
    "report": "jobs.cli.job_results:report_cmd",
    "worker": "jobs.cli.workers:worker",
    "broker": "jobs.cli.broker:broker",
    "models": "jobs.cli.models:models",
    "reprocess": "jobs.cli.ops:reprocess_cmd",
    "replay": "jobs.cli.ops:replay_cmd",
    "offsets": "jobs.cli.ops:offsets",
    "dlq": "jobs.cli.ops:dlq",
    "schedule": "jobs.cli.schedule:schedule",
}


@click.group(
    cls=NearlineGroup,
    context_settings={"auto_envvar_prefix": "NEARLINE", "show_default": True},
    # Each command's module is imported when that command runs: a worker never imports croniter
    # (schedules only), and a command starts without the others' modules (--help lists them all).
    lazy=COMMANDS,
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
    # stalled is doing, without stopping it (bench.system_cost asks so when a job stops moving).
    # A stderr with no file descriptor (click's CliRunner, which since click 8.4 gives none by
    # default; a host that embeds the CLI) has nowhere to write them: no dump then.
    with contextlib.suppress(io.UnsupportedOperation):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    # the command's module is imported by now (click resolves a lazy command before this group's
    # callback runs): what start-up made is never scanned again (runtime/heap.py)
    settle_heap()
    try:
        pack_limits_from_env()  # a bad $NEARLINE_PACK_* is said before any command reads input
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def main() -> None:
    settle_heaps_here()  # a process of its own: runtime/heap.py
    cli()
