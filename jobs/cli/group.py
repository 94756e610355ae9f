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
from runtime.metrics_endpoint import MetricsPortError
from schemas.model_config import InvalidModelNameError, ModelNotFoundError, ModelUnavailableError

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
        from gpu_consumer.engine import EngineLoadError
        from gpu_consumer.isolation import EngineFault
        from jobs.columnar import ColumnarShapeError
        from jobs.registry import JobNotFoundError
        from jobs.replay import ReplaySpecError
        from jobs.scheduling.errors import ScheduleExistsError, ScheduleNotFoundError, ScheduleSpecError
        from kafka_io.clients import as_refusal
        from kafka_io.errors import KAFKA_FAULTS, GroupProtocolError, SecuritySettingsError, TopicConfigError
        from model_repository.export import ExportUnavailableError
        from model_repository.import_source import ImportRefusedError

        try:
            return super().invoke(ctx)
        except UnusableInputError as exc:  # no --skip-invalid advice: it would not help
            for error in exc.errors[:50]:
                click.echo(f"error: {error}", err=True)
            click.echo(f"error: {exc}", err=True)
            ctx.exit(ExitCode.INVALID_INPUT)
        except InvalidInputError as exc:
            for error in exc.errors[:50]:
                click.echo(f"error: {error}", err=True)
            if len(exc.errors) > 50:
                click.echo(f"... and {len(exc.errors) - 50} more", err=True)
            click.echo(
                f"nothing was submitted: {len(exc.errors)} invalid record(s); fix them or pass --skip-invalid",
                err=True,
            )
            ctx.exit(ExitCode.INVALID_INPUT)
        except ImportRefusedError as exc:  # `models import`: a model folder that cannot work, said why
            click.echo(f"error: {exc}", err=True)
            click.echo("nothing was imported", err=True)
            ctx.exit(ExitCode.INVALID_INPUT)
        except (
            InvalidModelNameError,
            SecuritySettingsError,
            GroupProtocolError,
            TopicConfigError,
            ScheduleSpecError,
            ScheduleExistsError,
            ReplaySpecError,
            MetricsPortError,
        ) as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(ExitCode.USAGE)
        except (
            BrokerUnavailableError,
            ModelNotFoundError,
            ModelUnavailableError,
            ExportUnavailableError,
            EngineLoadError,
        ) as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(ExitCode.UNAVAILABLE)
        except KafkaRefusedError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(REFUSAL_CODES.get(type(exc), ExitCode.NOT_AUTHORIZED))
        except KAFKA_FAULTS as exc:  # a client call's own exception: a refusal is said as one
            refused = as_refusal(exc)
            if refused is None:
                raise
            click.echo(f"error: {refused}", err=True)
            ctx.exit(REFUSAL_CODES.get(type(refused), ExitCode.NOT_AUTHORIZED))
        except BacklogRefusedError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(ExitCode.REFUSED)
        except EngineFault as exc:
            click.echo(f"error: the engine failed on everything it was given, so no record was blamed: {exc}", err=True)
            ctx.exit(ExitCode.FAILED)
        except (JobNotFoundError, ScheduleNotFoundError) as exc:
            click.echo(f"error: {exc.args[0]}", err=True)
            ctx.exit(ExitCode.FAILED)
        except ColumnarShapeError as exc:  # `results`: the job's results are still on the broker
            click.echo(f"error: {exc}", err=True)
            ctx.exit(ExitCode.FAILED)
        except sqlite3.Error as exc:  # the results spill (jobs/spill.py), under $TMPDIR
            click.echo(
                f"error: the results spill under {tempfile.gettempdir()} failed: {exc} "
                "(a full disk? $TMPDIR names another folder)",
                err=True,
            )
            ctx.exit(ExitCode.FAILED)
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            click.echo(f"error: cannot write {exc.filename or 'a file'}: {exc.strerror}", err=True)
            ctx.exit(ExitCode.FAILED)
