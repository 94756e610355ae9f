"""The option decorators every `nearline` command shares: options that double as environment
variables, with the same names and help wherever they appear. Checking their values is
validators.py's; the root group and its error-to-exit-code mapping are group.py's."""

from __future__ import annotations

import functools
import math
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from jobs.job_terms import parse_duration, parse_labels, webhook_problem
from kafka_io.limits import MAX_VALUE_BYTES, RECORD_OVERHEAD_BYTES
from kafka_io.settings import ENV_BOOTSTRAP
from kafka_io.topology import DEFAULT_LANE, ENV_NAMESPACE, LANES
from model_repository.folders import ENV_MODEL_REPOSITORY, default_repository
from producers.formats import AUTO, FORMAT_NAMES, auto_help
from producers.images import MAX_IMAGE_BYTES
from producers.inputs import MAX_ATTRIBUTES_BYTES
from results.formats import OutputFormat, output_format_help
from results.output import OutputPathError, check_output_path, names_stdout
from runtime.cpus import host_cpus, parse_cpu_list
from runtime.metrics_endpoint import (
    ENV_METRICS_CLIENT_CA,
    ENV_METRICS_PORT,
    ENV_METRICS_TLS_CERT,
    ENV_METRICS_TLS_KEY,
    MetricsEndpoint,
)
from schemas import JobTerms

HOME = Path.home() / ".nearline"


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
        type=click.Choice(FORMAT_NAMES),
        default=AUTO,
        show_default=True,
        show_envvar=True,
        help=auto_help(),
    )(f)


def output_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """-o and --output-format: where results go and in which format (run, results)."""
    f = click.option(
        "--output-format",
        type=click.Choice([f.value for f in OutputFormat]),
        default=None,
        show_envvar=True,
        help=output_format_help(),
    )(f)
    return click.option(
        "--output",
        "-o",
        type=click.Path(dir_okay=False, path_type=Path),
        callback=_stdout_as_none,
        default=None,
        help="Write the results here, one per record in input order; - or /dev/stdout: standard output "
        "[default: stdout, JSON Lines].",
    )(f)


def _stdout_as_none(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """-o - and -o /dev/stdout as no -o: standard output is written to, never a file named `-`, and
    never /dev/stdout replaced by a file."""
    return None if names_stdout(value) else value


def priority_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--priority: the lane a job's records travel in. Live records are served before bulk ones
    at every stage; bulk keeps a minimum share of the engine (`nearline worker gpu --bulk-share`)."""
    return click.option(
        "--priority",
        type=click.Choice(LANES),
        default=DEFAULT_LANE,
        show_envvar=True,
        help="Lane: live jobs overtake bulk ones (a backfill) at every stage.",
    )(f)


def wait_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--timeout-s and --worker-grace-s: how long waiting on a job may take, and on workers that are gone."""
    f = click.option(
        "--worker-grace-s",
        "worker_grace",
        type=FiniteFloat(min=0),
        default=30.0,
        show_envvar=True,
        help="Give up (exit 6) once no worker has been alive, and no record done, for this many seconds.",
    )(f)
    return click.option(
        "--timeout-s",
        "timeout",
        type=FiniteFloat(min=0, min_open=True),
        default=None,
        show_envvar=True,
        help="Give up (exit 7) if the job has not completed after this many seconds [default: no limit].",
    )(f)


def _labels(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    try:
        labels = parse_labels(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    for key, text in labels.items():
        # shown in `jobs list` and `status` on a terminal: a carriage return or an escape sequence
        # in a label would rewrite the line or the terminal's title there
        control = next((c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
        if control is not None:
            raise click.BadParameter(
                f"label {key}: its value holds the control character {control!a}; a label is printable text"
            )
    return labels


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    try:
        return None if value is None else parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _webhook(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    problem = None if value is None else webhook_problem(value)
    if problem:
        raise click.BadParameter(problem)
    return value


def label_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--label KEY=VALUE, repeatable: the job's labels (`jobs list --label` finds them)."""
    return click.option(
        "--label",
        "labels",
        multiple=True,
        callback=_labels,
        metavar="KEY=VALUE",
        help="Label the job (repeatable); `nearline jobs list --label KEY=VALUE` finds it. In the environment: "
        "space-separated.",
    )(f)


NO_REUSE_HELP = (
    "Compute every record, even one whose result for the same content and model version is in the model's "
    "results cache (docs/reuse.md) [default: reuse]."
)


def terms_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--label, --complete-within, --notify and --no-reuse as one `terms: JobTerms` argument (submit,
    run, schedule add)."""

    @label_option
    @click.option(
        "--complete-within",
        callback=_duration,
        default=None,
        metavar="DURATION",
        help="Completion window (OpenAI's completion_window), e.g. 24h or 30m: past it, workers skip the job's "
        "remaining records, it ends expired, and `results` gives what finished [default: none].",
    )
    @click.option(
        "--notify",
        callback=_webhook,
        default=None,
        metavar="URL",
        help="POST the job's `status --json` document to this http(s) URL when it ends (delivered by "
        "`nearline worker notifier`).",
    )
    @click.option("--no-reuse", is_flag=True, help=NO_REUSE_HELP)
    @functools.wraps(f)
    def wrapper(
        *args: Any,
        labels: dict[str, str],
        complete_within: float | None,
        notify: str | None,
        no_reuse: bool,
        **kwargs: Any,
    ) -> Any:
        return f(*args, terms=JobTerms(labels, complete_within, notify, reuse=not no_reuse), **kwargs)

    return wrapper


def _errors_path(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """--errors, checked before any work as -o is: a folder that is missing or read-only is said at
    once, not after the whole job has run (that it is neither -o nor the input: validators.py)."""
    if value is None:
        return None
    try:
        check_output_path(value)
    except OutputPathError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def errors_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--errors FILE: the error file, a JSON line per record without a result (run, results)."""
    return click.option(
        "--errors",
        type=click.Path(dir_okay=False, path_type=Path),
        callback=_errors_path,
        default=None,
        metavar="FILE",
        help="Also write a JSON line per record with no result (dead-lettered with its stage and reason, "
        "cancelled, expired, not done), keyed by its id (and custom_id); with --output-format openai-batch, "
        "a line per failed request in OpenAI's error shape. - or /dev/stdout: standard output (with -o FILE).",
    )(f)


class EngineCpus(click.ParamType):
    """CPU ids as taskset writes them ("0-3,6"), of this host, leaving it some for the rest."""

    name = "cpus"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> frozenset[int]:
        if isinstance(value, frozenset):
            return value
        try:
            cpus = parse_cpu_list(str(value))
            host_cpus(cpus)
            return cpus
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
