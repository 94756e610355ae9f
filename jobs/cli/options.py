"""What every `nearline` command shares: the error-to-exit-code group, options that double as
environment variables, and progress output."""

from __future__ import annotations

import errno
import functools
import importlib
import math
import os
import shutil
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from jobs.exit_codes import ExitCode
from jobs.input_problems import InvalidInputError, UnusableInputError
from jobs.job_input import JobInput
from jobs.output import OutputFormat, OutputPathError, check_output_path, names_format, output_format
from jobs.progress import Progress
from jobs.submit import BacklogRefusedError, job_id_problem
from kafka_io.clients import check_not_refused
from kafka_io.errors import BrokerUnavailableError, MetricsPortError
from kafka_io.limits import MAX_VALUE_BYTES, RECORD_OVERHEAD_BYTES
from kafka_io.settings import (
    DEFAULT_PRIORITY,
    ENV_BOOTSTRAP,
    ENV_METRICS_CLIENT_CA,
    ENV_METRICS_PORT,
    ENV_METRICS_TLS_CERT,
    ENV_METRICS_TLS_KEY,
    ENV_NAMESPACE,
    PRIORITIES,
    KafkaSettings,
    MetricsEndpoint,
)
from producers.images import IMAGE_SUFFIXES, MAX_IMAGE_BYTES, printable
from producers.inputs import MAX_ATTRIBUTES_BYTES
from producers.table_rows import DEFAULT_COLUMNS, Columns
from schemas.model_config import (
    ENV_MODEL_REPOSITORY,
    InvalidModelNameError,
    ModelNotFoundError,
    ModelUnavailableError,
    default_repository,
)

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
        from gpu_consumer.import_source import ImportRefusedError
        from gpu_consumer.isolation import EngineFault
        from jobs.columnar import ColumnarShapeError
        from jobs.registry import JobNotFoundError
        from jobs.replay import ReplaySpecError
        from jobs.scheduling.errors import ScheduleExistsError, ScheduleNotFoundError, ScheduleSpecError
        from kafka_io.errors import SecuritySettingsError, TopicConfigError

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
    """--metrics-port and its TLS files, the same env vars for every worker (deployments set them
    once per pod); the command gets them as one `metrics: MetricsEndpoint | None`."""

    def tls_file(name: str, envvar: str, text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        kind = click.Path(dir_okay=False, path_type=Path)
        return click.option(name, type=kind, default=None, envvar=envvar, show_envvar=True, help=text)

    @click.option(
        "--metrics-port",
        type=click.IntRange(1, 65535),
        default=None,
        envvar=ENV_METRICS_PORT,
        show_envvar=True,
        help="Serve Prometheus metrics at http://0.0.0.0:PORT/metrics [default: off].",
    )
    @tls_file("--metrics-tls-cert", ENV_METRICS_TLS_CERT, "Serve them over HTTPS with this PEM certificate (chain), "
              "which may hold the key too.")  # fmt: skip
    @tls_file("--metrics-tls-key", ENV_METRICS_TLS_KEY, "Its PEM private key.")
    @tls_file("--metrics-client-ca", ENV_METRICS_CLIENT_CA, "Answer only scrapers whose client certificate this "
              "PEM CA signed (mutual TLS).")  # fmt: skip
    @functools.wraps(f)
    def wrapper(
        *args: Any,
        metrics_port: int | None,
        metrics_tls_cert: Path | None,
        metrics_tls_key: Path | None,
        metrics_client_ca: Path | None,
        **kwargs: Any,
    ) -> Any:
        tls = (metrics_tls_cert, metrics_tls_key, metrics_client_ca)
        if metrics_port is None and any(tls):
            raise click.UsageError(
                f"--metrics-tls-cert, --metrics-tls-key and --metrics-client-ca ({ENV_METRICS_TLS_CERT}, "
                f"{ENV_METRICS_TLS_KEY}, {ENV_METRICS_CLIENT_CA}) need --metrics-port ({ENV_METRICS_PORT})"
            )
        metrics = None if metrics_port is None else MetricsEndpoint(metrics_port, "0.0.0.0", *tls)
        return f(*args, metrics=metrics, **kwargs)

    return wrapper


def repository_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--model-repository",
        envvar=ENV_MODEL_REPOSITORY,
        show_envvar=True,
        default=default_repository,
        show_default="$XDG_CACHE_HOME/nearline/models, else ~/.cache/nearline/models",
        type=click.Path(file_okay=False, path_type=Path),
        help="Folder of <name>/<version>/ model folders; one per user by default, found from any folder.",
    )(f)


# A file the command writes failed for want of room or rights: said in a line, not a traceback.
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}


class FiniteFloat(click.FloatRange):
    """A FloatRange that refuses nan and inf: click lets nan through every bound (each comparison
    with it is false), and a worker given a nan linger never closes a window."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def batch_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--max-linger-ms",
        type=FiniteFloat(0, 60_000),
        default=20.0,
        show_default=True,
        show_envvar=True,
        help="Close a poll window this long after its first record, even if not full; sooner when the "
        "engine is idle, later (up to --max-window) while a window closed before still waits for the engine.",
    )(f)
    f = click.option(
        "--max-window",
        "--max-queue",  # its old name
        "max_window",
        type=click.IntRange(min=1),
        default=None,
        show_envvar=True,
        help="Records per poll window (what is consumed and committed together), sorted by length and cut "
        "into executed batches [default: 8 x max-batch-size].",
    )(f)
    f = click.option(
        "--max-batch-tokens",
        type=click.IntRange(min=1),
        default=None,
        show_envvar=True,
        help="Padded tokens per executed text batch [default: no limit beyond max-batch-size].",
    )(f)
    f = click.option(
        "--max-batch-size",
        type=click.IntRange(min=1),
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
        help='auto: a folder, an image file or a JSONL of {"image": path} is images, as is a table with '
        "the image column and no text column; anything else is text.",
    )(f)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["auto", "jsonl", "lines", "parquet", "csv", "tsv", "arrow"]),
        default="auto",
        show_default=True,
        show_envvar=True,
        help="auto: JSON Lines for .jsonl/.ndjson, a table for .parquet/.pq, .csv, .tsv, .arrow/.feather/.ipc "
        "(and a folder or glob of them), else one text per line.",
    )(f)


def output_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """-o and --output-format: where results go and in which format (run, results)."""
    f = click.option(
        "--output-format",
        type=click.Choice([f.value for f in OutputFormat]),
        default=None,
        show_envvar=True,
        help="jsonl: a JSON object per line; parquet: typed columns (embedding = fixed-size float32 list); "
        "arrow: Arrow IPC file. [default: from -o's suffix (.parquet/.pq, .arrow/.feather/.ipc), else jsonl]",
    )(f)
    return click.option(
        "--output",
        "-o",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Write the results here, one per record in input order [default: stdout, JSON Lines].",
    )(f)


def checked_job_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--job-id as given, or a usage error before anything is read or sent: a newline would break
    `jobs list`, and '../x' would lead `nearline report` out of its folder."""
    problem = None if value is None else job_id_problem(value)
    if problem:
        raise click.BadParameter(problem, ctx, param)
    return value


def checked_output(output: Path | None, forced_format: str | None) -> OutputFormat:
    """The output's format, once -o is known to take it: a usage error said at once, not a traceback
    after the whole job has run."""
    try:
        fmt = output_format(output, forced_format)
        if output is None:
            if fmt.binary:
                raise click.UsageError(f"--output-format {fmt} writes a file: name it with -o FILE")
            return fmt
        named = output_format(output) if names_format(output) else None
        if named is not None and named is not fmt:  # out.parquet holding Arrow, or JSON Lines
            raise click.BadParameter(
                f"{output.name} names {named} but --output-format says {fmt}: name the file for the format, "
                "or drop one of them",
                param_hint="'--output-format'",
            )
        check_output_path(output)
    except OutputPathError as exc:
        raise click.BadParameter(str(exc), param_hint="'--output' / '-o'") from None
    if forced_format is None and not names_format(output):  # out.txt, results: not what the name says
        click.echo(f"note: writing JSON Lines to {output} (.parquet or .arrow would choose another format)", err=True)
    return fmt


def opened_input(
    input_path: str,
    fmt: str,
    kind: str,
    max_image_bytes: int,
    follow_symlinks: bool,
    columns: Columns = DEFAULT_COLUMNS,
) -> JobInput:
    """INPUT as a job's input, with a note on stderr about files of an image folder that the job
    leaves out because their names are not images'."""
    job_input = JobInput.open(input_path, fmt, kind, max_image_bytes, follow_symlinks, columns)  # type: ignore[arg-type]
    left_out = job_input.left_out()
    if left_out:
        suffixes = Counter(printable(f.suffix.lower()) or "no suffix" for f in left_out).most_common()
        counts = ", ".join(f"{n} {suffix}" for suffix, n in suffixes[:5])
        if len(suffixes) > 5:
            counts += f" and {sum(n for _, n in suffixes[5:])} more of {len(suffixes) - 5} other suffixes"
        files = f"{len(left_out)} file{'s' if len(left_out) > 1 else ''}"
        are = "are not images" if len(left_out) > 1 else "is not an image"
        click.echo(
            f"note: left out {files} of {printable(input_path)} that {are} by name ({counts}; first "
            f"{printable(left_out[0])}); images are {' '.join(sorted(IMAGE_SUFFIXES))}",
            err=True,
        )
    return job_input


def require_servers(bootstrap_servers: str, probe: bool = True) -> KafkaSettings:
    """The settings of the named cluster; with `probe`, BrokerUnavailableError at once when nothing
    listens there. Workers probe later (check_reachable), after the checks that are usage errors."""
    if not bootstrap_servers:
        raise BrokerUnavailableError(
            f"no Kafka cluster named: pass --bootstrap-servers or set {ENV_BOOTSTRAP} "
            "(`nearline broker start` runs a local one)"
        )
    for server in bootstrap_servers.split(","):  # port 99999 was reported as refused
        port = server.strip().rpartition(":")[2]
        if port.isdigit() and not 0 < int(port) < 65536:
            raise click.BadParameter(
                f"{server.strip()}: invalid port {port} (a port is 1-65535)", param_hint="'--bootstrap-servers'"
            )
    settings = KafkaSettings.from_env(bootstrap_servers)
    if probe:
        check_not_refused(settings)  # known at once: not after the client's 15 s request timeout
    return settings


class ProgressDisplay:
    """Progress on stderr: on a terminal, a bar redrawn in place (and other lines printed above
    it); otherwise a plain line every `every_s` and at the end, so logs and pipes stay line-based."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.stream = click.get_text_stream("stderr")
        self.tty = self.stream.isatty()
        self.every_s = every_s
        self.drawn = False  # a bar is on the current line
        self.last = float("-inf")
        encoding = getattr(self.stream, "encoding", None) or "ascii"
        try:
            self.blocks = "█░" if "█░".encode(encoding) else "#-"
        except (UnicodeEncodeError, LookupError):
            self.blocks = "#-"

    def __call__(self, progress: Progress, label: str = "") -> None:
        now = time.monotonic()
        final = progress.done >= progress.total
        if self.tty:
            width = self._columns()
            self.stream.write("\r" + progress.bar_line(now, width, label, self.blocks) + "\x1b[K")
            self.drawn = not final
            if final:
                self.stream.write("\n")
            self.stream.flush()
        elif final or now - self.last >= self.every_s:
            click.echo((f"{label} " if label else "") + progress.line(now), err=True)
            self.last = now

    def _columns(self) -> int:
        try:  # the terminal stderr is on (shutil's asks stdout's, which -o may leave piped)
            return os.get_terminal_size(self.stream.fileno()).columns or 80
        except (OSError, ValueError, AttributeError):
            return shutil.get_terminal_size().columns

    def echo(self, line: str) -> None:
        """A line of its own, above the bar (which the next update draws again)."""
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.drawn = False
        click.echo(line, err=True)

    def close(self) -> None:
        """End a bar left mid-way (a failed or interrupted wait) so what follows starts a line."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def priority_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--priority: the lane a job's records travel in. Live records are served before batch ones
    at every stage; batch keeps a minimum share of the engine (`nearline worker gpu --batch-share`)."""
    return click.option(
        "--priority",
        type=click.Choice(PRIORITIES),
        default=DEFAULT_PRIORITY,
        show_envvar=True,
        help="Lane: live jobs overtake batch ones (a backfill) at every stage.",
    )(f)


def wait_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--timeout and --worker-grace: how long waiting on a job may take, and on workers that are gone."""
    f = click.option(
        "--worker-grace",
        type=FiniteFloat(min=0),
        default=30.0,
        show_envvar=True,
        help="Give up (exit 6) once no worker has been alive, and no record done, for this many seconds.",
    )(f)
    return click.option(
        "--timeout",
        type=FiniteFloat(min=0, min_open=True),
        default=None,
        show_envvar=True,
        help="Give up (exit 7) if the job has not completed after this many seconds [default: no limit].",
    )(f)
