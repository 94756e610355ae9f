"""Input sources, one module each. Every source yields InputRecord or InputError, in file order.

What belongs here: reading users' files (JSON Lines, plain lines, tables, image folders) with bounds.
What does not: producing to Kafka or registering jobs (jobs/submit.py), preprocessing
(preprocess_app/).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

from producers.inputs import InputError, InputRecord
from producers.jsonl import read_jsonl
from producers.lines import read_lines

InputFormat = Literal["auto", "jsonl", "lines", "parquet", "arrow", "csv", "tsv"]
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def read_text_input(
    path: Path, fmt: InputFormat = "auto", stream: IO[bytes] | None = None, text_key: str = "text", id_key: str = "id"
) -> Iterator[InputRecord | InputError]:
    """JSON Lines for .jsonl/.ndjson (or fmt="jsonl"), one text per line otherwise."""
    if fmt == "jsonl" or (fmt == "auto" and path.suffix.lower() in JSONL_SUFFIXES):
        return read_jsonl(path, stream, text_key, id_key)
    return read_lines(path, stream)


__all__ = ["JSONL_SUFFIXES", "InputError", "InputFormat", "InputRecord", "read_text_input"]
