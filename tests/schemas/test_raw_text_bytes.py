"""raw_text_bytes gives exactly the bytes fastavro's encode gives, and they decode back; read_raw_text
reads what fastavro reads and refuses what it refuses."""

from __future__ import annotations

import dataclasses
import json
import random
from importlib import resources
from typing import Any

import pytest

from schemas import RawText, SerdeError, TensorRecord, decode, encode
from schemas.errors import NotSingleObjectError, TruncatedRecordError, WrongRecordTypeError
from schemas.raw_text_bytes import _FIELDS, raw_text_bytes, read_raw_text
from schemas.serde import HEADER_LEN

CASES = [
    RawText("job-1", "r1", 0, "minilm", "hello", 0, {}),
    RawText("job-20261204-043000-abcdef", "file.jsonl:17", 63, "minilm", "", 1_764_822_600_123_456, {}),
    RawText("j", "é-ü", 2**40, "m", "naïve café ☕ " * 40, -1, {"lang": "fr", "": "é", "k" * 200: "v" * 300}),
    RawText("j", "x", 2**63 - 1, "m", "t", -(2**63), {"a": "b"}),
    RawText("j", "x", 127, "m", "t" * 127, 128, {}),
]


@pytest.mark.parametrize("record", CASES)
def test_bytes_are_those_of_encode_and_decode_back(record: RawText) -> None:
    built = raw_text_bytes(
        record.job_id, record.record_id, record.seq, record.model, record.text, record.submitted_at, record.attributes
    )
    assert built == encode(record)
    assert decode(built, RawText) == record


def test_layout_is_the_shipped_schemas() -> None:
    schema = json.loads((resources.files("schemas") / "avro" / "raw_text.avsc").read_text(encoding="utf-8"))
    assert tuple(f["name"] for f in schema["fields"]) == _FIELDS
    types = [f["type"] for f in schema["fields"]]
    assert types == ["string", "string", "long", "string", "string", {"type": "map", "values": "string"}, "long"]


@pytest.mark.parametrize("record", CASES)
def test_read_gives_fastavros_fields(record: RawText) -> None:
    parts = read_raw_text(encode(record))
    assert (parts.job_id, parts.record_id, parts.seq, parts.model, parts.text) == (
        record.job_id,
        record.record_id,
        record.seq,
        record.model,
        record.text,
    )
    assert (dict(parts.attributes), parts.submitted_at) == (record.attributes, record.submitted_at)


def test_every_truncation_any_trailing_byte_and_other_records_are_the_typed_errors() -> None:
    data = encode(CASES[2])
    for end in range(HEADER_LEN, len(data)):
        with pytest.raises(TruncatedRecordError):
            read_raw_text(data[:end])
    with pytest.raises(TruncatedRecordError, match="after the end"):
        read_raw_text(data + b"\x00")
    with pytest.raises(NotSingleObjectError):
        read_raw_text(b"{}")
    with pytest.raises(WrongRecordTypeError):
        read_raw_text(encode(TensorRecord("j", "r", 0, "m", "1", (), {}, {})))


def test_corrupted_records_read_as_fastavro_reads_them() -> None:
    """Random bytes of valid records overwritten: both readers give the same fields, or both a SerdeError."""
    rng = random.Random(7)
    for record in CASES:
        data = encode(record)
        for _ in range(600):
            corrupt = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                corrupt[rng.randrange(HEADER_LEN, len(corrupt))] = rng.randrange(256)
            try:
                want: Any = dataclasses.astuple(decode(bytes(corrupt), RawText))
            except SerdeError as exc:
                want = type(exc)
            try:
                p = read_raw_text(bytes(corrupt))
                got: Any = (p.job_id, p.record_id, p.seq, p.model, p.text, p.submitted_at, dict(p.attributes))
            except SerdeError as exc:
                got = type(exc)
            assert got == want, bytes(corrupt).hex()
