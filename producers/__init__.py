"""Input sources, one module each. Every source yields InputRecord or InputError, in file order.

What belongs here: reading users' files (JSON Lines, plain lines, tables, image folders) with bounds.
What does not: producing to Kafka or registering jobs (jobs/submit.py), preprocessing
(preprocess_app/).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

from producers.inputs import InputError, InputRecord
from producers.jsonl import read_jsonl
from producers.lines import read_lines
from producers.openai_batch import is_openai_request, read_openai_batch

InputFormat = Literal["auto", "jsonl", "openai-batch", "lines", "parquet", "arrow", "csv", "tsv"]
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def read_text_input(
    path: Path, fmt: InputFormat = "auto", stream: IO[bytes] | None = None, text_key: str = "text", id_key: str = "id"
) -> Iterator[InputRecord | InputError]:
    """JSON Lines for .jsonl/.ndjson (or fmt="jsonl"), OpenAI batch requests for fmt="openai-batch",
    one text per line otherwise."""
    if fmt == "openai-batch" or (fmt == "auto" and stream is None and is_openai_batch_file(path)):
        return read_openai_batch(path, stream)
    if fmt == "jsonl" or (fmt == "auto" and path.suffix.lower() in JSONL_SUFFIXES):
        return read_jsonl(path, stream, text_key, id_key)
    return read_lines(path, stream)


# Lines of a .jsonl file read to tell OpenAI batch requests from JSON Lines texts: the first that
# is JSON decides, so that one malformed first line is reported as itself, not as every other line.
DETECT_LINES = 20


def is_openai_batch_file(path: Path) -> bool:
    """Whether `path` is a JSON Lines file whose first JSON object among its first DETECT_LINES
    lines is an OpenAI batch request (producers/openai_batch.py): what --format auto reads as one."""
    if path.suffix.lower() not in JSONL_SUFFIXES or not path.is_file():
        return False
    with path.open("rb") as f:
        for raw in itertools.islice((line for line in f if line.strip()), DETECT_LINES):
            try:
                return is_openai_request(json.loads(raw))
            except ValueError:
                continue
    return False


__all__ = ["JSONL_SUFFIXES", "InputError", "InputFormat", "InputRecord", "read_text_input"]
