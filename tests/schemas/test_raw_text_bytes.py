"""raw_text_bytes gives exactly the bytes fastavro's encode gives, and they decode back."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from schemas import RawText, decode, encode
from schemas.raw_text_bytes import _FIELDS, raw_text_bytes

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
