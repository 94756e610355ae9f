"""JSON Lines input: one {"id": ..., "text": ..., "attributes": {...}} object per line, or for a
causal LM one request per line: {"id", "prompt"} or {"id", "messages"}, with optional "params"
(schemas/generation_request.py), read as a record whose text is the request."""

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
from schemas.generation_request import REQUEST_ATTRIBUTE, chat_request, prompt_request


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
    if text_key not in obj and ("prompt" in obj or "messages" in obj):
        return _request(obj, number, id_key)
    if text_key not in obj:
        raise ValueError(f'missing "{text_key}"' + (" (--text-field)" if text_key != "text" else ""))
    text = obj[text_key]
    if not isinstance(text, str):
        raise ValueError(f'"{text_key}" must be a string, got {json_type(text)}')
    problem = check_text(text)
    if problem:
        raise ValueError(problem)
    return InputRecord(record_id_of(obj, number, id_key), text, number, check_attributes(obj))


def _request(obj: dict[str, Any], number: int, id_key: str) -> InputRecord:
    """A generation request's line: its prompt or messages and params, checked now (RequestError is
    a ValueError: the line's error), its text the request, marked as one by REQUEST_ATTRIBUTE."""
    if "prompt" in obj and "messages" in obj:
        raise ValueError('a request has "prompt" or "messages", not both')
    params = obj.get("params", {})
    if not isinstance(params, dict):
        raise ValueError(f'"params" must be an object, got {json_type(params)}')
    if "prompt" in obj:
        request = prompt_request(obj["prompt"], params)
        problem = check_text(obj["prompt"])
        if problem:
            raise ValueError(problem)
    else:
        request = chat_request(obj["messages"], params)
    attributes = {**check_attributes(obj), REQUEST_ATTRIBUTE: "true"}
    return InputRecord(record_id_of(obj, number, id_key), request.to_text(), number, attributes)
