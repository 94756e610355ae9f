"""Where `nearline run` writes its results: -o, beside it when the run failed, or, when -o's
filesystem cannot take them, a folder under $TMPDIR (where they waited during the run), named.

The embedded broker is gone with the run, so the spill holds the only copy of the results: a write
that fails must not take them with it."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from jobs.cli.group import STORAGE_ERRNOS
from jobs.job_input import JobInput
from jobs.job_records import submitted_from_input
from jobs.liveness import JobCancelledError, JobExpiredError, JobWaitError
from producers import InputError
from results.columnar import ColumnarShapeError
from results.error_file import Missing
from results.formats import OUTPUTS, OutputFormat, keep_elsewhere, write_error_file
from results.job_output import JobOutput
from results.output import OutputPathError, check_output_path, partial_path, written_as_stream
from results.rows import write_rows
from results.spill import ResultSpill


@dataclass(frozen=True)
class RunOutput:
    path: Path | None  # where the records went: None for stdout, or for nowhere when count is 0
    fmt: OutputFormat
    count: int
    failed: bool  # -o did not get what was asked for: the run must not exit 0


def write_run_files(
    spill: ResultSpill,
    source: JobInput,
    output: Path | None,
    fmt: OutputFormat,
    errors: Path | None,
    failure: JobWaitError | None,
    cluster: bool,
    skipped: list[InputError],
) -> RunOutput:
    """The run's output (write_run_output) and its error file. A job that expired ended as it
    should: what finished goes to -o, as `results` would write it."""
    expired = isinstance(failure, JobExpiredError)
    run_failed = failure is not None and not expired
    job = JobOutput(spill, lambda: list(submitted_from_input(source)))
    written = write_run_output(job, output, fmt, run_failed=run_failed, cluster=cluster)
    if errors is not None:
        missing: Missing = (
            "expired" if expired else "cancelled" if isinstance(failure, JobCancelledError) else "not_done"
        )
        count = write_error_file(job, fmt, errors, missing, skipped)
        click.echo(f"wrote {count} error lines to {errors}", err=True)
    return written


def write_run_output(
    job: JobOutput, output: Path | None, fmt: OutputFormat, *, run_failed: bool, cluster: bool
) -> RunOutput:
    # cluster: the results stay on its topics, so `nearline results` can write them again
    """Write the job's output to output (or stdout), saying on stderr what went where when that fails."""
    spill = job.spill
    if run_failed and output is not None:
        output = partial_output(output, spill.done)
        if output is None:
            return RunOutput(None, fmt, 0, False)
    try:
        return RunOutput(output, fmt, OUTPUTS[fmt].write(job, output, sys.stdout), False)
    except ColumnarShapeError as exc:
        assert output is not None  # a columnar format needs -o
        jsonl = output.with_name(output.name + ".jsonl")
        click.echo(f"error: {exc}; writing them as JSON Lines to {jsonl} instead", err=True)
        try:
            return RunOutput(
                jsonl, OutputFormat.JSONL, write_rows(spill.rows(), None, jsonl, sys.stdout, kept=spill.kept), True
            )
        except OSError as again:
            return _kept_elsewhere(job, jsonl, OutputFormat.JSONL, again, cluster)
    except OSError as exc:
        return _kept_elsewhere(job, output, fmt, exc, cluster)


def _kept_elsewhere(job: JobOutput, wanted: Path | None, fmt: OutputFormat, exc: OSError, cluster: bool) -> RunOutput:
    if wanted is None or exc.errno not in STORAGE_ERRNOS:
        raise exc
    spill = job.spill
    folder = wanted.absolute().parent
    free = shutil.disk_usage(folder).free if folder.is_dir() else 0
    click.echo(f"error: cannot write {wanted}: {exc.strerror} ({_size(free)} free in {folder})", err=True)
    again_how = f"get them with nearline results {spill.job_id} -o FILE" if cluster else "run the job again"
    try:
        kept, count = keep_elsewhere(job, wanted, fmt)
    except OSError as again:
        click.echo(
            f"error: nor could they be kept under {spill.parent}: {again.strerror}; free some space there "
            f"or point $TMPDIR (or -o) at a filesystem with room, then {again_how}",
            err=True,
        )
        return RunOutput(None, fmt, 0, True)
    click.echo(
        f"kept the {count} records in {kept} instead ({_size(kept.stat().st_size)}): move the file where "
        f"you want it once {folder} has room",
        err=True,
    )
    return RunOutput(kept, fmt, count, True)


def _size(n: int) -> str:
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def partial_output(output: Path, results: int) -> Path | None:
    """Where a failed run writes what came back: beside -o, never over it, so a complete file from
    an earlier run stays as it was and nothing is mistaken for a finished job; None: nowhere."""
    if not results:
        click.echo("no results came back; -o was left as it was", err=True)
        return None
    if written_as_stream(output):  # a pipe or a terminal holds no earlier file: it gets what came back
        return output
    partial = partial_path(output)
    try:
        check_output_path(partial)
    except OutputPathError as exc:
        click.echo(f"error: cannot write the results so far: {exc}", err=True)
        return None
    return partial
