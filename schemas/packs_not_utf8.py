"""A pack whose records are whole but for strings that are not UTF-8, read record by record.

Avro strings are UTF-8, and fastavro refuses a pack holding one that is not: the whole pack was
one dead letter keyed to its first record, its valid records got neither a result nor a dead
letter of their own, and `dlq replay` sent the whole pack back to fail again. A foreign writer can
send such bytes (`ff fe`), so the pack is read here by hand, field by field in its schema's order:
what every record shares (the job, the model, ...) must be text; a record whose id, text or
attributes are not UTF-8 is marked undecodable with why, its columns holding what could be read
(the bad bytes replaced by U+FFFD, so a reader of ids alone never fails on it), and the others are
read as usual. The record alone (`raw_text_alone`, `tensor_record_alone`) is the single record
with its strings' bytes as they came, the payload of its dead letter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, Literal

import numpy as np

from schemas.avro_bytes import read_count, read_length, read_long, read_map, read_string
from schemas.records import RawText, TensorRecord
from schemas.result_encoding import avro_long, avro_long_map_block, avro_string
from schemas.serde import HEADER_LEN, MAGIC, fingerprint_of

Kind = Literal["string", "long", "bytes", "strings", "maps", "long_map"]
RAW_TEXT_PACK_FIELDS: tuple[tuple[str, Kind], ...] = (
    ("job_id", "string"),
    ("model", "string"),
    ("submitted_at", "long"),
    ("record_ids", "strings"),
    ("seqs", "bytes"),
    ("texts", "strings"),
    ("attributes", "maps"),
)
TENSOR_PACK_FIELDS: tuple[tuple[str, Kind], ...] = (
    ("job_id", "string"),
    ("model", "string"),
    ("model_version", "string"),
    ("record_ids", "strings"),
    ("seqs", "bytes"),
    ("tensor", "string"),
    ("dtype", "string"),
    ("offsets", "bytes"),
    ("data", "bytes"),
    ("attributes", "maps"),
    ("timestamps", "long_map"),
)
_WHAT = {"record_ids": "its id", "texts": "its text", "attributes": "its attributes"}
_UNREADABLE: dict[str, Any] = {"record_ids": None, "texts": "", "attributes": {}}

Span = tuple[int, int]  # [start, end) of one item's bytes


def read_not_utf8(data: bytes, header: bytes, fields: tuple[tuple[str, Kind], ...]) -> dict[str, Any] | None:
    """The pack's fields as fastavro gives them, plus `undecodable` (index -> why) and `spans`
    (column -> each record's bytes, for the record alone), where some record's strings are not
    UTF-8; None when the pack is malformed in any other way or a shared string is not text (the
    caller's own error stands)."""
    if not data.startswith(header):
        return None
    found: dict[str, Any] = {}
    spans: dict[str, list[Span]] = {}
    p = HEADER_LEN
    try:
        for name, kind in fields:
            if kind == "string":
                found[name], p = read_string(data, p)
            elif kind == "long":
                found[name], p = read_long(data, p)
            elif kind == "bytes":
                n, p = read_length(data, p)
                if p + n > len(data):
                    return None
                found[name], p = data[p : p + n], p + n
            elif kind == "long_map":
                found[name], p = read_map(data, p, read_long)
            else:
                spans[name], p = _spans(data, p, _skip_string if kind == "strings" else _skip_map)
    except (IndexError, UnicodeDecodeError):
        return None
    count = len(spans["record_ids"])
    if p != len(data) or any(len(s) != count for s in spans.values()):
        return None
    undecodable: dict[int, str] = {}
    for name, items in spans.items():
        values: list[Any] = []
        for i, (start, _) in enumerate(items):
            try:
                value, _ = read_string(data, start) if name != "attributes" else read_map(data, start, read_string)
            except UnicodeDecodeError as exc:
                verb = "are" if name == "attributes" else "is"
                bad = f"{_WHAT.get(name, name)} {verb} not UTF-8 ({exc.reason} at byte {exc.start})"
                undecodable[i] = f"{undecodable[i]}; {bad}" if i in undecodable else bad
                value = _UNREADABLE.get(name, "")
                if value is None:  # an id: what can be read of it, to key its dead letter by
                    value = data[read_length(data, start)[1] : items[i][1]].decode("utf-8", "replace")
            values.append(value)
        found[name] = values
    if not undecodable:
        return None  # every string is text: what fastavro refused is something else
    found["undecodable"] = {
        i: f"record {found['record_ids'][i]!r} of the pack cannot be read: {why}" for i, why in undecodable.items()
    }
    found["spans"] = {name: [data[s:e] for s, e in items] for name, items in spans.items()}
    return found


@cache
def _header(schema: str) -> bytes:
    return MAGIC + fingerprint_of(schema)


def raw_text_alone(f: Mapping[str, Any], i: int, seq: int) -> bytes:
    """Record i of the RawTextPack read by read_not_utf8 as a single RawText, its bytes as they came."""
    spans = f["spans"]
    return b"".join(
        (
            _header(RawText.SCHEMA),
            avro_string(f["job_id"]),
            spans["record_ids"][i],
            avro_long(seq),
            avro_string(f["model"]),
            spans["texts"][i],
            spans["attributes"][i],
            avro_long(f["submitted_at"]),
        )
    )


def tensor_record_alone(f: Mapping[str, Any], i: int, seq: int, ids: np.ndarray) -> bytes:
    """Record i of the TensorPack read by read_not_utf8 as a single TensorRecord (its ids `ids`,
    little-endian), its strings' bytes as they came."""
    spans = f["spans"]
    tensor = b"".join(
        (
            avro_long(1),  # one tensor, then the array's end
            avro_string(f["tensor"]),
            avro_string(f["dtype"]),
            avro_long(1) + avro_long(len(ids)) + b"\x00",  # shape [n]
            avro_long(ids.nbytes),
            ids.tobytes(),
            b"\x00",
        )
    )
    return b"".join(
        (
            _header(TensorRecord.SCHEMA),
            avro_string(f["job_id"]),
            spans["record_ids"][i],
            avro_long(seq),
            avro_string(f["model"]),
            avro_string(f["model_version"]),
            tensor,
            spans["attributes"][i],
            avro_long_map_block(f["timestamps"]) + b"\x00",
        )
    )


def _spans(data: bytes, p: int, skip: Callable[[bytes, int], int]) -> tuple[list[Span], int]:
    """The span of each item of the Avro array at p (blocks of items `skip` steps over), and its end."""
    spans: list[Span] = []
    count, p = read_count(data, p)
    while count:
        for _ in range(count):
            end = skip(data, p)
            spans.append((p, end))
            p = end
        count, p = read_count(data, p)
    return spans, p


def _skip_string(data: bytes, p: int) -> int:
    n, p = read_length(data, p)
    if p + n > len(data):
        raise IndexError(f"a string of {n} bytes with {len(data) - p} left")
    return p + n


def _skip_map(data: bytes, p: int) -> int:
    count, p = read_count(data, p)
    while count:
        for _ in range(count):
            p = _skip_string(data, _skip_string(data, p))
        count, p = read_count(data, p)
    return p
