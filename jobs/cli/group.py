"""The root group's class: lazy commands, and the one mapping of the errors users can cause or
fix to a clear line and an exit code (jobs/exit_codes.py)."""

from __future__ import annotations

import errno
import importlib
import sqlite3
import tempfile
from typing import Any

import click

from jobs.cli.envvars import name_envvars
from jobs.exit_codes import ExitCode
from jobs.input_problems import InvalidInputError, UnusableInputError
from jobs.submit import BacklogRefusedError
from kafka_io.errors import (
    BrokerUnavailableError,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaRefusedError,
    KafkaTlsError,
)
from model_repository.config import InvalidModelNameError, ModelNotFoundError, ModelUnavailableError
from runtime.metrics_endpoint import MetricsPortError

# Kafka said no: each kind of refusal has its code, as no retry or wait will mend it.
REFUSAL_CODES: dict[type[KafkaRefusedError], ExitCode] = {
    KafkaAuthenticationError: ExitCode.NOT_AUTHENTICATED,
    KafkaAuthorizationError: ExitCode.NOT_AUTHORIZED,
    KafkaTlsError: ExitCode.TLS_FAILED,
}

# A file the command writes failed for want of room or rights: said in a line, not a traceback.
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}


class NearlineGroup(click.Group):
    """Turns the errors users can cause or fix into one clear line and a distinct exit code.

    `lazy` names commands by "module:attribute", imported only when that command runs (or help
    lists it): a worker process then never imports what only other commands need."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        self._named: set[str] = set()  # commands whose options' environment variables are named (envvars.py)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command: click.Command | None
        if cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
        else:
            command = super().get_command(ctx, cmd_name)
        if command is not None and cmd_name not in self._named:
            name_envvars(command, f"{ctx.auto_envvar_prefix or 'NEARLINE'}_{cmd_name.upper().replace('-', '_')}")
            self._named.add(cmd_name)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            said = _said(exc)
            if said is None:  # a bug, or click's own exits: its traceback or click's handling
                raise
            lines, code = said
            for line in lines:
                click.echo(line, err=True)
            ctx.exit(code)


def _said(exc: Exception) -> tuple[list[str], ExitCode] | None:
    """The lines and the exit code of an error users can cause or fix (checked in this order, the
    narrower kinds first); None for any other."""
    from gpu_consumer.engines.protocol import EngineLoadError
    from gpu_consumer.isolation import EngineFault
    from jobs.registry import JobNotFoundError
    from jobs.replay import ReplaySpecError
    from jobs.scheduling.errors import ScheduleExistsError, ScheduleNotFoundError, ScheduleSpecError
    from kafka_io.clients import as_refusal
    from kafka_io.errors import KAFKA_FAULTS, GroupProtocolError, SecuritySettingsError, TopicConfigError
    from model_import.export import ExportUnavailableError
    from model_import.import_source import ImportRefusedError
    from results.columnar import ColumnarShapeError
    from results.spill import NoRecordsError

    if isinstance(exc, InvalidInputError | UnusableInputError):
        return _input_lines(exc), ExitCode.INVALID_INPUT
    if isinstance(exc, ImportRefusedError):  # `models import`: a model folder that cannot work, said why
        return [f"error: {exc}", "nothing was imported"], ExitCode.INVALID_INPUT
    usage: tuple[type[Exception], ...] = (InvalidModelNameError, SecuritySettingsError, GroupProtocolError)
    usage += (TopicConfigError, ScheduleSpecError, ScheduleExistsError, ReplaySpecError, MetricsPortError)
    unavailable = (BrokerUnavailableError, ModelNotFoundError, ModelUnavailableError, ExportUnavailableError)
    for kinds, code in ((usage, ExitCode.USAGE), ((*unavailable, EngineLoadError), ExitCode.UNAVAILABLE)):
        if isinstance(exc, kinds):
            return [f"error: {exc}"], code
    refused = exc if isinstance(exc, KafkaRefusedError) else as_refusal(exc) if isinstance(exc, KAFKA_FAULTS) else None
    if refused is not None:  # a client call's own exception is said as the refusal it is
        return [f"error: {refused}"], REFUSAL_CODES.get(type(refused), ExitCode.NOT_AUTHORIZED)
    if isinstance(exc, KAFKA_FAULTS):
        return None
    if isinstance(exc, BacklogRefusedError):
        return [f"error: {exc}"], ExitCode.REFUSED
    if isinstance(exc, EngineFault):
        return [f"error: the engine failed on everything it was given, so no record was blamed: {exc}"], ExitCode.FAILED
    if isinstance(exc, JobNotFoundError | NoRecordsError | ScheduleNotFoundError):
        return [f"error: {exc.args[0]}"], ExitCode.FAILED
    if isinstance(exc, ColumnarShapeError):  # `results`: the job's results are still on the broker
        return [f"error: {exc}"], ExitCode.FAILED
    if isinstance(exc, sqlite3.Error):  # the results spill (results/spill.py), under $TMPDIR
        why = f"{exc} (a full disk? $TMPDIR names another folder)"
        return [f"error: the results spill under {tempfile.gettempdir()} failed: {why}"], ExitCode.FAILED
    if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
        return [f"error: cannot write {exc.filename or 'a file'}: {exc.strerror}"], ExitCode.FAILED
    return None


def _input_lines(exc: InvalidInputError | UnusableInputError) -> list[str]:
    """The first 50 problems of an input, then what became of the command."""
    lines = [f"error: {error}" for error in exc.errors[:50]]
    if isinstance(exc, UnusableInputError):  # no --skip-invalid advice: it would not help
        return [*lines, f"error: {exc}"]
    if len(exc.errors) > 50:
        lines.append(f"... and {len(exc.errors) - 50} more")
    return [*lines, f"nothing was submitted: {len(exc.errors)} invalid record(s); fix them or pass --skip-invalid"]
