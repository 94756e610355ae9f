"""JSON Lines input: one {"id": ..., "text": ..., "attributes": {...}} object per line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from producers.inputs import (
    InputError,
    InputRecord,
    check_attributes,
    check_text,
    json_type,
    parsed_lines,
    record_id_of,
)


def read_jsonl(
    path: Path, stream: IO[bytes] | None = None, text_key: str = "text", id_key: str = "id"
) -> Iterator[InputRecord | InputError]:
    """Records in file order, the text under text_key and the id under id_key (the line number
    when absent); blank lines are skipped."""
    first_seen: dict[str, int] = {}
    for record in parsed_lines(path, stream, lambda line, number: _parse(line, number, text_key, id_key)):
        if isinstance(record, InputError):
            yield record
        elif record.record_id in first_seen:
            first = first_seen[record.record_id]
            yield InputError(str(path), record.line, f"duplicate id {record.record_id!r} (first on line {first})")
        else:
            first_seen[record.record_id] = record.line
            yield record


def _parse(line: str, number: int, text_key: str, id_key: str) -> InputRecord:
    try:
        obj: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    if text_key not in obj:
        raise ValueError(f'missing "{text_key}"' + (" (--text-field)" if text_key != "text" else ""))
    text = obj[text_key]
    if not isinstance(text, str):
        raise ValueError(f'"{text_key}" must be a string, got {json_type(text)}')
    problem = check_text(text)
    if problem:
        raise ValueError(problem)
    return InputRecord(record_id_of(obj, number, id_key), text, number, check_attributes(obj))
