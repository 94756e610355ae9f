"""Plain text input: one record per non-blank line, its id the line number."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO

from producers.inputs import InputError, InputRecord, check_text, decode_line


def read_lines(path: Path, stream: IO[bytes] | None = None) -> Iterator[InputRecord | InputError]:
    source = stream if stream is not None else path.open("rb")
    with source:
        for number, raw in enumerate(source, start=1):
            try:
                text = decode_line(raw, number).rstrip("\r\n")
            except ValueError as exc:
                yield InputError(str(path), number, str(exc))
                continue
            if not text.strip():
                continue
            problem = check_text(text)
            if problem:
                yield InputError(str(path), number, problem)
            else:
                yield InputRecord(str(number), text, number)
