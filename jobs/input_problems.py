"""Why an input cannot be a job, found before anything is sent: the errors a submit refuses
with and the checks on a path, its first bytes and --keep-columns that name the problem."""

from __future__ import annotations

import stat
from pathlib import Path

from producers.formats import FORMATS, JSON_LINES, described, format_named, suffix_format
from producers.images import file_kind
from producers.inputs import InputError, compression
from producers.table_rows import DEFAULT_COLUMNS, RESERVED_NAMES, Columns


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
    """Why --keep-columns cannot be kept as asked, before any file is read. A kept column named
    like a model output comes back as "input.<name>" (results/kept_columns.py), so one already named so
    would be a second column of that name; the model's outputs are not known here, so the pair is
    refused whatever the model."""
    clash = sorted(set(columns.keep) & RESERVED_NAMES)
    if clash:
        fields = "field" if len(clash) == 1 else "fields"
        return f"--keep-columns: {', '.join(clash)} would shadow the result's own {fields} of that name"
    for name in columns.keep:
        if name.startswith("input.") and name.removeprefix("input.") in columns.keep:
            bare = name.removeprefix("input.")
            return (
                f'--keep-columns: "{bare}" and "{name}" would both come back as "{name}" when the model has an '
                f'output "{bare}" (a kept column named like a model output comes back as "input.<name>"): '
                "keep one of them"
            )
    return None


# Which reading option each Columns field is, for options_problem.
OPTION_FLAGS = {
    "text": "--text-column",
    "image": "--image-column",
    "id": "--id-column",
    "keep": "--keep-columns",
    "text_field": "--text-field",
    "id_field": "--id-field",
}


def options_problem(columns: Columns, reads: str, name: str) -> str | None:
    """Why column options given for input `name` would be ignored: they are refused instead. reads
    is "table", "jsonl" (texts as JSON Lines) or what else the input is read as ("texts, one per
    line", "images"); the options each format takes are its registry entry's (producers/formats.py).
    An option at its default was not given, or changes nothing."""
    given = [flag for key, flag in OPTION_FLAGS.items() if getattr(columns, key) != getattr(DEFAULT_COLUMNS, key)]
    read_as = [f for f in FORMATS if reads in (f.name, f.kind)]
    wrong = [flag for flag in given if not any(flag in f.options for f in read_as)]
    if not wrong:
        return None
    if reads == "table":
        why = "a table (--text-column and --id-column name its columns)"
    elif reads == JSON_LINES.name:
        why = 'JSON Lines (--text-field and --id-field name its keys; its lines\' "attributes" come back in results)'
    else:
        why = reads
    takers = [f for f in FORMATS if set(wrong) <= set(f.options)]
    where = f"to {described(takers)}" if takers else f"to the {described(f for f in FORMATS if f.options)} they name"
    applies = " and ".join(wrong) + (" applies" if len(wrong) == 1 else " apply")
    return f"{applies} only {where}: {name} is read as {why}"


def stdin_format_problem(fmt: str) -> str | None:
    """Why stdin cannot be read in format fmt: a table is a file (its schema, its row groups)."""
    named = format_named(fmt)
    if named is None or named.table is None:
        return None
    return (
        f"--format {fmt}: stdin is read as texts, one per line, or JSON Lines (--format jsonl); "
        f"a {fmt} table must be a file: write it to one and name it as INPUT"
    )


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
    if suffix_format(fifo) is JSON_LINES:
        return f"{why}; to send a stream of JSON Lines texts, pipe it to stdin: - as INPUT, with --format jsonl"
    if suffix in (".txt", ""):
        return f"{why}; to send a stream of texts, one per line, pipe it to stdin: - as INPUT"
    return f"{why}; stdin takes only texts (one per line, or --format jsonl): write the stream to a regular file first"
