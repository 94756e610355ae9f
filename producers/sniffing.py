"""What an input path is, told by its suffix and at most its first lines (producers/formats.py
names the formats): a table or a folder of tables, images, OpenAI batch requests, JSON Lines
texts or texts, one per line."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

from producers.formats import JSON_LINES, LINES, OPENAI_BATCH, InputFormat, format_named, suffix_format
from producers.images import is_image_path
from producers.inputs import InputError, InputRecord
from producers.openai_batch import is_openai_request
from producers.table_rows import DEFAULT_COLUMNS, Columns
from producers.tables import table_files, table_format

# Lines of a .jsonl file read to tell OpenAI batch requests from JSON Lines texts: the first that
# is JSON decides, so that one malformed first line is reported as itself, not as every other line.
DETECT_LINES = 20


def table_parts(path: Path, fmt: str = "auto") -> tuple[Path, ...]:
    """The table files `path` names: itself (a .parquet, .csv, ... or any file with a table
    --format), or a folder's table files when it holds no image; else ()."""
    named = format_named(fmt)
    if named is not None and named.table is None:
        return ()
    if path.is_dir():
        files = table_files(path)
        return tuple(files) if files and not any(is_image_path(p) for p in path.rglob("*")) else ()
    return (path,) if named is not None or table_format(path) is not None else ()


def detect_kind(path: Path) -> Literal["text", "image"]:
    """A folder or an image file is images; a JSONL whose first object has "image" is images; else text."""
    if path.is_dir() or is_image_path(path):
        return "image"
    if suffix_format(path) is JSON_LINES and path.is_file():
        with path.open("rb") as f:
            for raw in f:
                if raw.strip():
                    try:
                        first = json.loads(raw)
                    except ValueError:
                        return "text"  # the text reader reports the line
                    return "image" if isinstance(first, dict) and "image" in first else "text"
    return "text"


def is_openai_batch_file(path: Path) -> bool:
    """Whether `path` is a JSON Lines file whose first JSON object among its first DETECT_LINES
    lines is an OpenAI batch request (producers/openai_batch.py): what --format auto reads as one."""
    if suffix_format(path) is not JSON_LINES or not path.is_file():
        return False
    with path.open("rb") as f:
        for raw in itertools.islice((line for line in f if line.strip()), DETECT_LINES):
            try:
                return is_openai_request(json.loads(raw))
            except ValueError:
                continue
    return False


def text_format(path: Path, fmt: str = "auto", stream: IO[bytes] | None = None) -> InputFormat:
    """What a text input is read as: the format --format names, else OpenAI batch requests when a
    .jsonl file's first object is one, else what its suffix says, else texts, one per line."""
    named = format_named(fmt)
    if named is not None and named.read is not None:
        return named
    if named is None and stream is None and is_openai_batch_file(path):
        return OPENAI_BATCH
    found = suffix_format(path) if named is None else None
    return found if found is not None and found.read is not None else LINES


def read_text_input(
    path: Path, fmt: str = "auto", stream: IO[bytes] | None = None, columns: Columns = DEFAULT_COLUMNS
) -> Iterator[InputRecord | InputError]:
    """A text input's records (or stdin's, from `stream`), read as text_format says."""
    reader = text_format(path, fmt, stream).read
    assert reader is not None
    return reader(path, stream, columns.text_field, columns.id_field)
