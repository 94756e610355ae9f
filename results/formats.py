"""The one list of output formats, OUTPUTS: what `--output-format` offers and its help says, the
suffixes that choose each for -o, whether it is a binary file, and its writer, one shape for all:
write(job, path, out) -> the records (or lines) written, where job is the JobOutput (the job's
outcomes, and its submitted records when asked) and out is standard output's text stream for a
format written as lines. Each format's error file (--errors) comes from its error_lines.

A new format is its writer in a module of its own and one line here (docs/architecture.md)."""

from __future__ import annotations

import io
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

from producers import InputError
from results import columnar, error_file, openai_batch
from results.columnar import OpenTable
from results.error_file import Missing
from results.job_output import JobOutput
from results.outcome import dumps_line
from results.output import OutputPathError, each_line, write_file
from results.rows import write_rows

Writer = Callable[[JobOutput, Path | None, IO[str]], int]
ErrorLines = Callable[[JobOutput, Missing, Iterable[InputError]], Iterable[dict[str, Any]]]


class OutputFormat(StrEnum):
    JSONL = "jsonl"
    PARQUET = "parquet"
    ARROW = "arrow"
    OPENAI_BATCH = "openai-batch"

    @property
    def binary(self) -> bool:
        return OUTPUTS[self].binary


@dataclass(frozen=True)
class Output:
    """One output format: what --output-format's help says of it, the suffixes that choose it
    for -o, its writer, whether it is a binary file (never written to a terminal; a text one is
    JSON Lines, whatever its shape), its error file's lines and what its writer counts."""

    says: str
    suffixes: tuple[str, ...]
    write: Writer
    binary: bool = False
    error_lines: ErrorLines = error_file.lines_of
    unit: str = "records"  # what write counts


def _rows(table: OpenTable | None) -> Writer:
    """A writer of the job's records, one row each in input order: JSON Lines, or the columnar
    file table opens (results/rows.py)."""

    def write(job: JobOutput, path: Path | None, out: IO[str]) -> int:
        spill = job.spill
        return write_rows(spill.rows(), spill.example(), path, out, table, spill.kept)

    return write


OUTPUTS: dict[OutputFormat, Output] = {
    OutputFormat.JSONL: Output("a JSON object per line", (".jsonl", ".ndjson", ".jsonlines"), write=_rows(None)),
    OutputFormat.PARQUET: Output(
        "typed columns (embedding = fixed-size float32 list)",
        (".parquet", ".pq"),
        write=_rows(columnar.parquet_file),
        binary=True,
    ),
    OutputFormat.ARROW: Output(
        "Arrow IPC file (Feather v2), the same columns",
        (".arrow", ".feather", ".ipc"),
        write=_rows(columnar.arrow_file),
        binary=True,
    ),
    OutputFormat.OPENAI_BATCH: Output(
        "OpenAI's batch output, a line per request",
        (),
        write=openai_batch.write,
        error_lines=openai_batch.error_lines_of,
        unit="request lines",
    ),
}
_SUFFIXES = {suffix: fmt for fmt, output in OUTPUTS.items() for suffix in output.suffixes}


def output_format_help() -> str:
    """--output-format's help, from OUTPUTS."""
    each = "; ".join(f"{fmt.value}: {output.says}" for fmt, output in OUTPUTS.items())
    chosen = ", ".join("/".join(o.suffixes) for o in OUTPUTS.values() if o.suffixes)
    return f"{each}. [default: from -o's suffix ({chosen}), else jsonl]"


# Names that promise a format nearline does not write: JSON Lines under them would be read wrong
# (a .csv opened as a table, a .json as one document, a .gz decompressed), so they are refused.
_FOREIGN = {
    **dict.fromkeys((".csv", ".tsv", ".json", ".xlsx", ".xls", ".xml", ".yaml", ".yml", ".html", ".htm"), "table"),
    **dict.fromkeys((".avro", ".orc", ".pickle", ".pkl", ".npy", ".npz", ".h5", ".hdf5", ".sqlite", ".db"), "table"),
    **dict.fromkeys((".gz", ".bz2", ".xz", ".zst", ".zip", ".tar", ".7z", ".lz4", ".snappy"), "compressed"),
}


class OutputFormatError(OutputPathError):
    """The output's name promises a format nearline does not write."""


def output_format(path: Path | None, forced: str | None = None) -> OutputFormat:
    """The format asked for, else the one the file name says (.parquet, .arrow, ...), else JSON Lines;
    OutputFormatError for a name that says another format (.csv, .json, .gz, ...)."""
    if forced is not None:
        return OutputFormat(forced)
    if path is None:
        return OutputFormat.JSONL
    suffix = path.suffix.lower()
    if suffix in _FOREIGN:
        what = "compress its output" if _FOREIGN[suffix] == "compressed" else f"write {suffix[1:].upper()}"
        raise OutputFormatError(
            f"{path}: nearline does not {what}; name the file .jsonl (JSON Lines), .parquet or .arrow, "
            "or pass --output-format jsonl to write JSON Lines under this name anyway"
        )
    return _SUFFIXES.get(suffix, OutputFormat.JSONL)


def names_format(path: Path) -> bool:
    """Whether path's suffix chooses its format (else it gets JSON Lines by default)."""
    return path.suffix.lower() in _SUFFIXES


def write_error_file(
    job: JobOutput, fmt: OutputFormat, path: Path, missing: Missing, invalid: Iterable[InputError] = ()
) -> int:
    """The error file in fmt's shape: a line per input line that was not submitted (`invalid`: what
    --skip-invalid left out) and per record (or request) without a result; the lines written."""
    lines = (dumps_line(line) for line in OUTPUTS[fmt].error_lines(job, missing, invalid))
    write = each_line(lines)
    return write_file(path, lambda f: write(f.write), binary=True)


def keep_elsewhere(job: JobOutput, wanted: Path, fmt: OutputFormat) -> tuple[Path, int]:
    """Write the job's records to a new folder beside its spill, as a file named like wanted: where
    a run's results go when wanted's filesystem cannot take them. That folder held them all (in
    sqlite) during the run, so it most likely has room. (path, records); OSError if not."""
    folder = Path(tempfile.mkdtemp(prefix="nearline-kept-", dir=job.spill.parent))
    path = folder / wanted.name
    try:
        return path, OUTPUTS[fmt].write(job, path, io.StringIO())
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
