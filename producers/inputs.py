"""What every input source yields: a record to submit, or a problem pinned to file and line."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from schemas.attributes import attribute_text

T = TypeVar("T")

# A text record larger than this is refused at submit: it cannot be meant as one input of a
# 512-token model, and Kafka clusters commonly cap records at 1 MB.
MAX_TEXT_BYTES = 1_000_000
# Attributes travel with the record through every stage into its result; bounded so that a
# record's size is its text or image plus at most this (kafka_io/limits.py has the record limit).
MAX_ATTRIBUTES_BYTES = 64 * 1024


@dataclass(frozen=True)
class InputRecord:
    record_id: str
    text: str
    line: int
    attributes: dict[str, str] = field(default_factory=dict)  # values as JSON text


@dataclass(frozen=True)
class InputError:
    path: str
    line: int
    reason: str
    unit: str = ""  # what `line` counts where it is not a line of text: "row" of a table, "line" of a CSV

    def __str__(self) -> str:
        # line 0: the problem is the file itself (an image in a folder), not a line of it
        if not self.line:
            return f"{self.path}: {self.reason}"
        return f"{self.path}:{self.unit + ' ' if self.unit else ''}{self.line}: {self.reason}"


# What compressed input starts with: read as text it is a screen of "not valid UTF-8" lines.
COMPRESSED = (
    (b"\x1f\x8b", "gzip", "gzip -dk"),
    (b"BZh", "bzip2", "bzip2 -dk"),  # then a digit and the block magic 1AY&SY, checked below
    (b"\xfd7zXZ\x00", "xz", "xz -dk"),
    (b"\x28\xb5\x2f\xfd", "zstd", "zstd -d"),
    (b"PK\x03\x04", "zip", "unzip"),
)


def compression(head: bytes) -> tuple[str, str] | None:
    """(format, command that decompresses it) for the first bytes of a compressed file, else None."""
    for magic, name, command in COMPRESSED:
        if head.startswith(magic) and (name != "bzip2" or head[4:10] == b"1AY&SY"):
            return name, command
    return None


def decode_line(raw: bytes, number: int = 0) -> str:
    """Line `number` of the file as text, or ValueError naming the offending byte. The first line
    loses a UTF-8 byte-order mark (Windows editors write one), which JSON would refuse."""
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})") from None


def parsed_lines(path: Path, stream: IO[bytes] | None, parse: Callable[[str, int], T]) -> Iterator[T | InputError]:
    """Each non-blank line of the file (or stream), as parse(line, number) makes it, in file order;
    a line that is not UTF-8, or that parse refuses with a ValueError, as the InputError naming it."""
    source = stream if stream is not None else path.open("rb")
    with source:
        for number, raw in enumerate(source, start=1):
            try:
                line = decode_line(raw, number).rstrip("\r\n")
                if not line.strip():
                    continue
                yield parse(line, number)
            except ValueError as exc:
                yield InputError(str(path), number, str(exc))


def lone_surrogate(value: str) -> str | None:
    """Where `value` holds a lone surrogate, which no UTF-8 encoder takes (a JSON escape such as
    \\ud800 makes one), as "U+D800 at position 3"; None when it has none."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"U+{ord(value[exc.start]):04X} at position {exc.start + 1}"
    return None


def check_text(text: str) -> str | None:
    """Why a text cannot be submitted, or None when it can."""
    if not text.strip():
        return "text is empty"
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return f"text holds a lone surrogate ({lone_surrogate(text)}), which is not valid Unicode"
    if size > MAX_TEXT_BYTES:
        return f"text is {size} bytes, over the limit of {MAX_TEXT_BYTES}"
    return None


def check_attributes(obj: dict[str, Any]) -> dict[str, str]:
    """A JSON line's "attributes", each value as its JSON text (schemas/attributes.py), or
    ValueError when they are there but not an object, or a value JSON cannot carry."""
    attributes = obj.get("attributes", {})
    if not isinstance(attributes, dict):
        raise ValueError(f'"attributes" must be an object, got {json_type(attributes)}')
    strings = {}
    for key, value in attributes.items():
        constant = non_finite(value)
        if constant is not None:
            is_ = "is" if constant is value else "holds"
            raise ValueError(
                f'attribute "{key}" {is_} {describe_non_finite(constant)}, which JSON cannot carry: '
                "write it as a string or null"
            )
        strings[key] = attribute_text(value)
    size = 0
    for string, raw in (*((k, k) for k in strings), *((strings[k], attributes[k]) for k in strings)):
        try:
            size += len(string.encode("utf-8"))
        except UnicodeEncodeError:
            shown = raw if isinstance(raw, str) else string
            where = f"{lone_surrogate(shown)} of {shown!r}"
            raise ValueError(f'"attributes" hold a lone surrogate ({where}), which is not valid Unicode') from None
    if size > MAX_ATTRIBUTES_BYTES:
        raise ValueError(f'"attributes" hold {size:,} bytes, over the limit of {MAX_ATTRIBUTES_BYTES:,}')
    return strings


def non_finite(value: Any) -> float | None:
    """The first NaN or infinity in a decoded JSON value (Python's json reads NaN, Infinity and
    numbers beyond a double's range, such as 1e400, as floats), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((found for item in items if (found := non_finite(item)) is not None), None)


def describe_non_finite(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    sign = "-" if value < 0 else ""
    return f"{sign}Infinity (or a number too large for a double, such as {sign}1e400)"


def record_id_of(obj: dict[str, Any], number: int, key: str = "id") -> str:
    """A JSON line's id (under `key`) as text (its line number when absent), or ValueError saying why not."""
    record_id = obj.get(key, number)
    if isinstance(record_id, bool) or not isinstance(record_id, str | int) or record_id == "":
        raise ValueError(f'"{key}" must be a non-empty string or an integer, got {json.dumps(record_id)}')
    text = str(record_id)
    surrogate = lone_surrogate(text)
    if surrogate:
        raise ValueError(f'"{key}" holds a lone surrogate ({surrogate}), which is not valid Unicode')
    return text


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages."""
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )
