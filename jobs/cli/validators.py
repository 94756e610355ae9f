"""The option validators: a value given on the command line checked (or opened) before anything
is read or sent, with a usage error that names the option."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click

from jobs.input_problems import unreadable_input
from jobs.job_input import STDIN, JobInput
from jobs.submit import job_id_problem
from kafka_io.clients import check_not_refused
from kafka_io.errors import BrokerUnavailableError
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from producers.images import IMAGE_SUFFIXES, printable
from producers.table_rows import DEFAULT_COLUMNS, Columns
from results.formats import OutputFormat, names_format, output_format
from results.output import OutputPathError, check_output_path, leads_to_stdout, names_stdout, opened_on


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
                raise click.UsageError(
                    f"--output-format {fmt} writes a file: name it with -o FILE (standard output takes JSON Lines)"
                )
            return fmt
        named = output_format(output) if names_format(output) else None
        # every text format is JSON Lines (OpenAI's batch output too): out.jsonl takes any of them
        if named is not None and named is not fmt and (named.binary or fmt.binary):
            # out.parquet holding Arrow, or JSON Lines
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


def job_model(model: str | None, source: JobInput) -> str:
    """--model, else the model an OpenAI batch input names (its first request's body.model); a
    usage error when neither names one."""
    if model:
        return model
    if source.path != STDIN and (problem := unreadable_input(source.path, folder_ok=True)) is not None:
        raise click.UsageError(f"{source.path}: {problem}")  # what is wrong first, not a missing --model
    named = source.openai_model()
    if named is None:
        raise click.UsageError("Missing option '--model' / '-m' (only an OpenAI batch file names its own model).")
    return named


def check_errors_path(errors: Path | None, *others: tuple[str, str | Path | None]) -> None:
    """A usage error when --errors names the same file as one of `others` ((what, path) pairs: -o,
    the input), which writing it would replace: by its path resolved (`..`, links) or, when both
    exist, as the same file; or when it is standard output and so are the results (-o absent or -),
    by name or through a link or the file a shell redirected it to (leads_to_stdout)."""
    if errors is None:
        return
    if leads_to_stdout(errors):
        if any(what == "-o" and (other is None or leads_to_stdout(other)) for what, other in others):
            raise click.BadParameter(
                f"{errors} is standard output, where the results go too: name a file with -o or --errors",
                param_hint="'--errors'",
            )
        return
    for what, other in others:
        if other is None or names_stdout(other) or str(other) == "-":
            if str(other) == "-" and what == "the input" and opened_on(errors, 0):  # the file stdin is
                raise click.BadParameter(
                    f"{errors} is {what} too (standard input): the error file would replace it", param_hint="'--errors'"
                )
            continue
        same = Path(other).resolve() == errors.resolve()
        if same or (errors.exists() and Path(other).exists() and errors.samefile(other)):
            raise click.BadParameter(
                f"{errors} is {what} too: the error file would replace it", param_hint="'--errors'"
            )
