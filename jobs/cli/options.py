"""What every `nearline` command shares: the error-to-exit-code group, options that double as
environment variables, and progress output."""

from __future__ import annotations

import functools
import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from jobs.exit_codes import ExitCode
from jobs.launch.local import ENV_MODEL_REPOSITORY
from jobs.progress import Progress
from jobs.submit import BacklogRefusedError, InvalidInputError
from kafka_io.errors import BrokerUnavailableError, MetricsPortError
from kafka_io.limits import MAX_VALUE_BYTES, RECORD_OVERHEAD_BYTES
from kafka_io.settings import ENV_BOOTSTRAP, ENV_METRICS_PORT, ENV_NAMESPACE, KafkaSettings
from producers.images import MAX_IMAGE_BYTES
from producers.inputs import MAX_ATTRIBUTES_BYTES
from schemas.model_config import InvalidModelNameError, ModelNotFoundError, ModelUnavailableError

HOME = Path.home() / ".nearline"


class NearlineGroup(click.Group):
    """Turns the errors users can cause or fix into one clear line and a distinct exit code.

    `lazy` names commands by "module:attribute", imported only when that command runs (or help
    lists it): a worker process then never imports what only other commands need."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            command: click.Command = getattr(importlib.import_module(module), attribute)
            return command
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        from gpu_consumer.engine import EngineLoadError
        from gpu_consumer.export import ExportUnavailableError
        from gpu_consumer.isolation import EngineFault
        from jobs.registry import JobNotFoundError
        from jobs.scheduling.errors import ScheduleExistsError, ScheduleNotFoundError, ScheduleSpecError
        from kafka_io.errors import SecuritySettingsError, TopicConfigError

        try:
            return super().invoke(ctx)
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
        except (
            InvalidModelNameError,
            SecuritySettingsError,
            TopicConfigError,
            ScheduleSpecError,
            ScheduleExistsError,
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
        except BacklogRefusedError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(ExitCode.REFUSED)
        except EngineFault as exc:
            click.echo(f"error: the engine failed on everything it was given, so no record was blamed: {exc}", err=True)
            ctx.exit(ExitCode.FAILED)
        except (JobNotFoundError, ScheduleNotFoundError) as exc:
            click.echo(f"error: {exc.args[0]}", err=True)
            ctx.exit(ExitCode.FAILED)


def cluster_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--bootstrap-servers and --namespace, with the same env var names on every command."""

    @click.option(
        "--bootstrap-servers",
        envvar=ENV_BOOTSTRAP,
        show_envvar=True,
        default="",
        help="Kafka cluster (host:port,...).",
    )
    @click.option(
        "--namespace",
        envvar=ENV_NAMESPACE,
        show_envvar=True,
        default="",
        help="Prefix of every topic and group name, to share a cluster between pipelines.",
    )
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return f(*args, **kwargs)

    return wrapper


def metrics_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--metrics-port, the same env var for every worker (deployments set it once per pod)."""
    return click.option(
        "--metrics-port",
        type=click.IntRange(1, 65535),
        default=None,
        envvar=ENV_METRICS_PORT,
        show_envvar=True,
        help="Serve Prometheus metrics at http://0.0.0.0:PORT/metrics [default: off].",
    )(f)


def repository_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--model-repository",
        envvar=ENV_MODEL_REPOSITORY,
        show_envvar=True,
        default="models",
        type=click.Path(file_okay=False, path_type=Path),
        help="Folder of models/<name>/<version>/.",
    )(f)


def batch_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--max-linger-ms",
        type=float,
        default=20.0,
        show_default=True,
        show_envvar=True,
        help="Close a poll window this long after its first record, even if not full.",
    )(f)
    f = click.option(
        "--max-window",
        "--max-queue",  # its old name
        "max_window",
        type=int,
        default=None,
        show_envvar=True,
        help="Records per poll window (what is consumed and committed together), sorted by length and cut "
        "into executed batches [default: 8 x max-batch-size].",
    )(f)
    f = click.option(
        "--max-batch-tokens",
        type=int,
        default=None,
        show_envvar=True,
        help="Padded tokens per executed text batch [default: no limit beyond max-batch-size].",
    )(f)
    f = click.option(
        "--max-batch-size",
        type=int,
        default=None,
        show_envvar=True,
        help="Records per executed batch [default: the model's max_batch_size].",
    )(f)
    return f


def batch_args(**options: float | int | None) -> list[str]:
    """The batch options as `nearline worker gpu` arguments, for the workers `run` starts."""
    return [a for name, v in options.items() if v is not None for a in (f"--{name.replace('_', '-')}", str(v))]


def format_option(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--follow-symlinks",
        is_flag=True,
        show_envvar=True,
        help="Folder input: also read symlinks that lead out of the folder (refused by default, naming each).",
    )(f)
    f = click.option(
        "--max-image-bytes",
        # an image record holds the image, its attributes and ids: all must fit in one record
        type=click.IntRange(1, MAX_VALUE_BYTES - MAX_ATTRIBUTES_BYTES - RECORD_OVERHEAD_BYTES),
        default=MAX_IMAGE_BYTES,
        envvar="NEARLINE_MAX_IMAGE_BYTES",
        show_envvar=True,
        help="Refuse (at submit, naming the file) any larger image. At most the record limit less room "
        "for attributes (kafka_io/limits.py).",
    )(f)
    f = click.option(
        "--kind",
        type=click.Choice(["auto", "text", "image"]),
        default="auto",
        show_envvar=True,
        help='auto: a folder, an image file or a JSONL of {"image": path} is images; anything else is text.',
    )(f)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["auto", "jsonl", "lines"]),
        default="auto",
        show_default=True,
        show_envvar=True,
        help="Text input: JSON Lines for .jsonl/.ndjson (auto), or one text per line.",
    )(f)


def require_servers(bootstrap_servers: str) -> KafkaSettings:
    if not bootstrap_servers:
        raise BrokerUnavailableError(
            f"no Kafka cluster named: pass --bootstrap-servers or set {ENV_BOOTSTRAP} "
            "(`nearline broker start` runs a local one)"
        )
    return KafkaSettings.from_env(bootstrap_servers)


def progress_printer() -> Callable[[Progress], None]:
    tty = sys.stderr.isatty()
    last = [0.0]

    def show(p: Progress) -> None:
        now = time.monotonic()
        if tty:
            click.echo("\r" + p.line(now).ljust(79), nl=p.done >= p.total, err=True)
        elif now - last[0] >= 5 or p.done >= p.total:
            click.echo(p.line(now), err=True)
            last[0] = now

    return show


def wait_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--timeout and --worker-grace: how long waiting on a job may take, and on workers that are gone."""
    f = click.option(
        "--worker-grace",
        type=click.FloatRange(min=0),
        default=30.0,
        show_envvar=True,
        help="Give up (exit 6) once no worker has been alive, and no record done, for this many seconds.",
    )(f)
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        show_envvar=True,
        help="Give up (exit 7) if the job has not completed after this many seconds [default: no limit].",
    )(f)
