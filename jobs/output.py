"""Where `-o` results go and in which format: checked before any work, written to a temporary file
and renamed into place."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import IO, Any


class OutputFormat(StrEnum):
    JSONL = "jsonl"  # one JSON object per record, floats as text
    PARQUET = "parquet"  # columnar, typed: what pandas, Polars, DuckDB and Spark read natively
    ARROW = "arrow"  # Arrow IPC file (Feather v2): the same columns, uncompressed, memory-mappable
    OPENAI_BATCH = "openai-batch"  # OpenAI's batch output: JSON Lines, one line per request (jobs/openai_output.py)

    @property
    def binary(self) -> bool:
        return self in (OutputFormat.PARQUET, OutputFormat.ARROW)


_SUFFIXES = {
    ".jsonl": OutputFormat.JSONL,
    ".ndjson": OutputFormat.JSONL,
    ".jsonlines": OutputFormat.JSONL,
    ".parquet": OutputFormat.PARQUET,
    ".pq": OutputFormat.PARQUET,
    ".arrow": OutputFormat.ARROW,
    ".feather": OutputFormat.ARROW,
    ".ipc": OutputFormat.ARROW,
}
# Names that promise a format nearline does not write: JSON Lines under them would be read wrong
# (a .csv opened as a table, a .json as one document, a .gz decompressed), so they are refused.
_FOREIGN = {
    **dict.fromkeys((".csv", ".tsv", ".json", ".xlsx", ".xls", ".xml", ".yaml", ".yml", ".html", ".htm"), "table"),
    **dict.fromkeys((".avro", ".orc", ".pickle", ".pkl", ".npy", ".npz", ".h5", ".hdf5", ".sqlite", ".db"), "table"),
    **dict.fromkeys((".gz", ".bz2", ".xz", ".zst", ".zip", ".tar", ".7z", ".lz4", ".snappy"), "compressed"),
}


class OutputPathError(ValueError):
    """The output path cannot take a results file; said before the job starts, not after it ends."""


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


def check_output_path(path: Path) -> None:
    """Raise OutputPathError unless a results file can be written at path and renamed into place."""
    folder = path.absolute().parent
    if path.exists() or path.is_symlink():
        mode = path.stat().st_mode if path.exists() else 0
        if stat.S_ISDIR(mode):
            raise OutputPathError(f"{path} is a folder; name a file in it")
        if not stat.S_ISREG(mode):
            raise OutputPathError(f"{path} is not a regular file (a device, pipe, socket or broken link)")
        if not os.access(path, os.W_OK):
            raise OutputPathError(f"{path} exists and is read-only")
    if not folder.is_dir():
        raise OutputPathError(f"folder {folder} does not exist")
    # the results are renamed into place, so the folder itself must take a new file; trying is
    # the only sure test (root passes every access check, and /proc or a read-only mount refuse)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputPathError(f"cannot create files in folder {folder}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(probe)


def partial_path(path: Path) -> Path:
    """Where a run that failed writes the results it has: beside path, never over it, so a failed
    rerun leaves a previous complete file as it was (out.jsonl -> out.partial.jsonl)."""
    return path.with_name(f"{path.stem}.partial{path.suffix}")


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomically(path: Path, write: Callable[[IO[Any]], int], *, binary: bool = False) -> int:
    """write(f) into a temporary file next to path, fsync it, rename it over path; returns write's count.
    f is a text file (UTF-8), or a binary one when binary.

    A crash or error mid-write leaves path as it was (absent or the old file), never half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.absolute().parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would make results private by surprise
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            count = write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename is None:
            exc.filename = str(path)  # a full disk fails write(), which names no file: name the one wanted
        raise
    return count


def write_output(
    path: Path | None,
    out: IO[str],
    fmt: OutputFormat,
    lines: Callable[[Callable[[bytes], object]], int],
    table: Callable[[IO[bytes]], int],
) -> int:
    """A job's records to path (through a temporary file renamed into place) or, as JSON Lines only,
    to out: lines(write) writes them as JSON Lines through write(bytes), table(f) as the columnar
    fmt to a binary file. Returns the records written."""
    if fmt is OutputFormat.JSONL:
        if path is None:
            return lines(lambda chunk: out.write(chunk.decode()))
        return write_atomically(path, lambda f: lines(f.write), binary=True)
    if path is None:
        raise OutputPathError(f"{fmt} output is a file: name it with -o")
    return write_atomically(path, table, binary=True)
