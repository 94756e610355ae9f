"""Why an input cannot be a job, found before anything is sent: the errors a submit refuses
with and the checks on a path, its first bytes and --keep-columns that name the problem."""

from __future__ import annotations

import stat
from pathlib import Path

from producers import InputError
from producers.images import file_kind
from producers.inputs import compression
from producers.table_rows import RESERVED_NAMES, Columns


class UnusableInputError(ValueError):
    """The input as a whole cannot be a job (not a regular file, compressed, no valid record):
    nothing is submitted, with or without --skip-invalid. `errors`: the records' problems, if any."""

    def __init__(self, message: str, errors: list[InputError] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class InvalidInputError(ValueError):
    def __init__(self, errors: list[InputError]) -> None:
        super().__init__(f"{len(errors)} invalid record(s), first: {errors[0]}")
        self.errors = errors


def kept_columns_problem(columns: Columns) -> str | None:
    """Why --keep-columns cannot be kept as asked, before any file is read."""
    clash = sorted(set(columns.keep) & RESERVED_NAMES)
    if clash:
        fields = "field" if len(clash) == 1 else "fields"
        return f"--keep-columns: {', '.join(clash)} would shadow the result's own {fields} of that name"
    return None


def unreadable_input(path: Path, folder_ok: bool) -> str | None:
    """Why `path` cannot be read as an input, or None. A device or a FIFO is refused before it is
    opened: /dev/zero would be read without end, a FIFO would block (and could not be read twice)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    if stat.S_ISREG(mode) or (folder_ok and stat.S_ISDIR(mode)):
        return None
    return f"is {file_kind(mode)}, not a regular file"


def compressed_input(head: bytes, where: str) -> str | None:
    """Why input starting with `head` is refused when it is compressed, else None. Refused, not
    read: a job's input is read twice (to validate, then to send), and decompressing it first
    costs the user one command."""
    found = compression(head)
    if found is None:
        return None
    name, command = found
    return f"is {name}-compressed; nearline reads uncompressed input: decompress it first ({command} {where})"


def fifo_advice(fifo: Path) -> str:
    """What to do with a FIFO given as INPUT. stdin is read as texts, one per line unless --format
    jsonl says otherwise: "pipe it with -" alone made a JSON Lines stream a job of raw JSON texts."""
    why = "a job reads its input twice, to validate it and then to send it"
    suffix = fifo.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return f"{why}; to send a stream of JSON Lines texts, pipe it to stdin: - as INPUT, with --format jsonl"
    if suffix in (".txt", ""):
        return f"{why}; to send a stream of texts, one per line, pipe it to stdin: - as INPUT"
    return f"{why}; stdin takes only texts (one per line, or --format jsonl): write the stream to a regular file first"
