"""The input formats, in one registry: the name --format gives each, the suffixes --format auto
knows it by, the kind of records it holds, how it is read, and the reading options it takes.
The CLI's --format choices and help, sniffing (producers/sniffing.py), validation and the readers
all read FORMATS; a new format is a reader module and one line here (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from producers.arrow_ipc import ArrowTable
from producers.csv_tables import CsvTable, TsvTable
from producers.inputs import InputError, InputRecord
from producers.jsonl import read_jsonl
from producers.lines import read_lines
from producers.openai_batch import read_openai_batch
from producers.parquet import ParquetTable
from producers.table_reader import Table

# What a format's records are: texts, generation requests (sniffed from JSON Lines' first line),
# or a table's rows (texts or images, from the columns --text-column or --image-column name).
FormatKind = Literal["text", "requests", "table"]
# A text format's reader: (file, stdin's bytes or None, the key of the text, the key of the id)
TextReader = Callable[[Path, IO[bytes] | None, str, str], Iterator[InputRecord | InputError]]

JSON_LINES_OPTIONS = ("--text-field", "--id-field")
TABLE_OPTIONS = ("--text-column", "--image-column", "--id-column", "--keep-columns")
AUTO = "auto"  # no format named: each file's suffix says, else texts, one per line


@dataclass(frozen=True)
class InputFormat:
    """One input format. A table format is opened by its `table` class (a file, never stdin);
    any other is read by `read`, from a file or a stream."""

    name: str  # as --format spells it
    title: str  # as messages and --help name it
    suffixes: tuple[str, ...]  # what --format auto reads as this format; () when only sniffing or --format says
    kind: FormatKind
    options: tuple[str, ...] = ()  # the reading options that apply to it; any other given is refused
    read: TextReader | None = None
    table: Callable[[Path], Table] | None = None


FORMATS = (
    InputFormat("jsonl", "JSON Lines", (".jsonl", ".ndjson"), "text", JSON_LINES_OPTIONS, read=read_jsonl),
    InputFormat(
        "openai-batch",
        "OpenAI batch requests",
        (),
        "requests",
        read=lambda path, stream, *_: read_openai_batch(path, stream),
    ),
    InputFormat("lines", "texts, one per line", (), "text", read=lambda path, stream, *_: read_lines(path, stream)),
    InputFormat("parquet", "Parquet", (".parquet", ".pq"), "table", TABLE_OPTIONS, table=ParquetTable),
    InputFormat("arrow", "Arrow", (".arrow", ".feather", ".ipc"), "table", TABLE_OPTIONS, table=ArrowTable),
    InputFormat("csv", "CSV", (".csv",), "table", TABLE_OPTIONS, table=CsvTable),
    InputFormat("tsv", "TSV", (".tsv",), "table", TABLE_OPTIONS, table=TsvTable),
)
FORMAT_NAMES = (AUTO, *(f.name for f in FORMATS))  # --format's choices
_BY_NAME = {f.name: f for f in FORMATS}
_BY_SUFFIX = {suffix: f for f in FORMATS for suffix in f.suffixes}
JSON_LINES = _BY_NAME["jsonl"]  # what a .jsonl is sniffed in: images, requests or texts
OPENAI_BATCH = _BY_NAME["openai-batch"]
LINES = _BY_NAME["lines"]  # what a file of no known suffix, and stdin, is read as
TABLES = tuple(f for f in FORMATS if f.kind == "table")


def format_named(name: str) -> InputFormat | None:
    """The format --format `name` names; None for auto; ValueError for a name no format has."""
    if name == AUTO:
        return None
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown input format {name!r}: one of {', '.join(FORMAT_NAMES)}") from None


def suffix_format(path: Path) -> InputFormat | None:
    """The format `path`'s suffix says, without opening it; None when no format has its suffix."""
    return _BY_SUFFIX.get(path.suffix.lower())


def open_table(path: Path, fmt: str | None = None) -> Table:
    """`path` opened as the table format `fmt` names (a name of another format counts as none), else
    as its suffix says, else as Parquet; TableError when it cannot be read as one."""
    candidates = (format_named(fmt) if fmt else None, suffix_format(path), _BY_NAME["parquet"])
    opener = next(f.table for f in candidates if f is not None and f.table is not None)
    return opener(path)


def described(formats: Iterable[InputFormat]) -> str:
    """Formats as messages name them: "table inputs (Parquet, Arrow, CSV, TSV) or JSON Lines input"."""
    formats = list(formats)
    tables = [f.title for f in formats if f.kind == "table"]
    others = [f"{f.title} input" for f in formats if f.kind != "table"]
    return " or ".join([*([f"table inputs ({', '.join(tables)})"] if tables else []), *others])


def table_titles() -> str:
    """The table formats as messages name them: "Parquet, Arrow, CSV, TSV"."""
    return ", ".join(f.title for f in TABLES)


def auto_help() -> str:
    """--format's help: what auto reads each suffix as."""
    texts = ", ".join(f"{f.title} for {'/'.join(f.suffixes)}" for f in FORMATS if f.kind == "text" and f.suffixes)
    requests = "".join(f" ({f.title} when the first line is one)" for f in FORMATS if f.kind == "requests")
    tables = ", ".join("/".join(f.suffixes) for f in TABLES)
    return f"auto: {texts}{requests}, a table for {tables} (and a folder or glob of them), else one text per line."
