"""read_tensor_record against the reference, serde.decode_fields (fastavro): the same fields, the
same errors, and spans of the record's bytes that are exactly what the result encoder would write."""

from __future__ import annotations

import dataclasses
import json
import random
from importlib import resources
from typing import Any

import numpy as np
import pytest

from schemas import InferenceResult, RawText, Tensor, TensorRecord, decode, encode
from schemas.errors import (
    NotSingleObjectError,
    SerdeError,
    TruncatedRecordError,
    UnknownSchemaError,
    WrongRecordTypeError,
)
from schemas.result_encoding import ResultEncoder, RowTensor, avro_long, avro_string, encoded_ids, encoded_maps
from schemas.serde import HEADER_LEN, decode_fields
from schemas.tensor_record_bytes import read_tensor_record

CASES = [
    TensorRecord(
        "job-1",
        "r1",
        0,
        "minilm",
        "1",
        (Tensor.from_array("input_ids", np.array([101, 7592, 102], dtype=np.uint16)),),
        {},
        {"submitted": 1_764_822_600_123_456, "preprocess_start": 1_764_822_600_223_456, "preprocess_end": 2},
    ),
    TensorRecord(
        "job-é" * 20,
        "ü" * 300,
        -(2**63),
        "m" * 64,
        "",
        (
            Tensor.from_array("pixel_values", np.arange(24, dtype=np.uint8).reshape(2, 3, 4)),
            Tensor.from_array("scalar", np.array(1.5, dtype=np.float32)),
            Tensor.from_array("empty", np.zeros((0, 5), dtype=np.int64)),
        ),
        {"lang": "en", "ключ": "значение", "k" * 200: "v" * 5000},
        {"a": -1, "b": 2**63 - 1, "": 0},
    ),
    TensorRecord("j", "x", 2**40, "m", "2", (), {}, {}),
]


def fields_of(data: bytes) -> dict[str, Any]:
    """read_tensor_record's fields in decode_fields' shape, tensor data as bytes."""
    p = read_tensor_record(data)
    return {
        "job_id": p.job_id,
        "record_id": p.record_id,
        "seq": p.seq,
        "model": p.model,
        "model_version": p.model_version,
        "tensors": [{"name": n, "dtype": d, "shape": s, "data": bytes(b)} for n, d, s, b in p.tensors],
        "attributes": dict(p.attributes),
        "timestamps": dict(p.timestamps),
    }


def reference(data: bytes) -> dict[str, Any]:
    f = decode_fields(data, TensorRecord)
    return {**f, "tensors": [{**t, "data": bytes(t["data"])} for t in f["tensors"]]}


@pytest.mark.parametrize("record", CASES)
def test_fields_are_fastavros_and_spans_are_the_encoders_bytes(record: TensorRecord) -> None:
    data = encode(record)
    assert fields_of(data) == reference(data)
    parts = read_tensor_record(data)
    assert parts.ids == encoded_ids(record.job_id, record.record_id, record.seq)
    assert parts.maps == encoded_maps(record.attributes, record.timestamps)
    for _, _, _, view in parts.tensors:
        assert view.obj is data  # a view on the record's bytes, not a copy


def test_results_from_the_spans_are_byte_for_byte_those_from_the_decoded_fields() -> None:
    records = [encode(r) for r in CASES]
    rows = np.arange(3 * 4, dtype=np.float32).reshape(3, 4)
    encoder = ResultEncoder("minilm", "1")

    def results(ids: list[bytes], maps: list[bytes]) -> list[bytes]:
        return encoder.encode_batch(
            ids=ids,
            outputs=[RowTensor("embedding", rows)],
            labels=None,
            batch_id="w.0",
            lengths=[3, 0, 0],
            padded_length=3,
            maps=maps,
            batch_timestamps={"batch_formed": 1, "inference_start": 2, "inference_end": 3, "result_produced": 4},
        )

    parts = [read_tensor_record(d) for d in records]
    fields = [decode_fields(d, TensorRecord) for d in records]
    from_bytes = results([p.ids for p in parts], [p.maps for p in parts])
    encoded = results(
        [encoded_ids(f["job_id"], f["record_id"], f["seq"]) for f in fields],
        [encoded_maps(f["attributes"], f["timestamps"]) for f in fields],
    )
    assert from_bytes == encoded
    for value, record in zip(from_bytes, CASES, strict=True):
        result = decode(value, InferenceResult)
        assert (result.job_id, result.record_id, result.seq) == (record.job_id, record.record_id, record.seq)
        assert result.attributes == record.attributes
        assert result.timestamps == {
            **record.timestamps,
            "batch_formed": 1,
            "inference_start": 2,
            "inference_end": 3,
            "result_produced": 4,
        }


def test_a_map_written_in_negative_count_blocks_reads_the_same_and_its_result_too() -> None:
    # The spec lets a writer give a block's count negated, followed by the block's size in bytes.
    record = CASES[0]
    data = encode(dataclasses.replace(record, attributes={"a": "b"}))
    entry = avro_string("a") + avro_string("b")
    block = avro_long(1) + entry
    assert data.count(block) == 1
    blocked = data.replace(block, avro_long(-1) + avro_long(len(entry)) + entry)
    assert fields_of(blocked) == reference(blocked) == reference(data)
    parts = read_tensor_record(blocked)
    (value,) = ResultEncoder("minilm", "1").encode_batch(
        ids=[parts.ids],
        outputs=[],
        labels=None,
        batch_id="w.0",
        lengths=[3],
        padded_length=3,
        maps=[parts.maps],
        batch_timestamps={},
    )
    assert decode(value, InferenceResult).attributes == {"a": "b"}


def test_every_truncation_and_any_trailing_byte_is_the_typed_error() -> None:
    data = encode(CASES[1])
    for end in range(HEADER_LEN, len(data)):
        with pytest.raises(TruncatedRecordError):
            read_tensor_record(data[:end])
    with pytest.raises(TruncatedRecordError, match="after the end"):
        read_tensor_record(data + b"\x00")


def test_not_avro_another_record_type_or_an_unknown_schema() -> None:
    with pytest.raises(NotSingleObjectError):
        read_tensor_record(b"{}")
    with pytest.raises(WrongRecordTypeError):
        read_tensor_record(encode(RawText("j", "r", 0, "m", "t", 0, {})))
    with pytest.raises(UnknownSchemaError):
        read_tensor_record(b"\xc3\x01" + b"\x00" * 8)


def test_corrupted_records_read_as_fastavro_reads_them() -> None:
    """Random bytes of valid records overwritten: both readers give the same fields, or both a SerdeError."""
    rng = random.Random(31)
    for record in CASES[:1] + CASES[2:]:
        data = encode(record)
        for _ in range(1500):
            corrupt = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                corrupt[rng.randrange(HEADER_LEN, len(corrupt))] = rng.randrange(256)
            try:
                want: Any = reference(bytes(corrupt))
            except SerdeError as exc:
                want = type(exc)
            try:
                got: Any = fields_of(bytes(corrupt))
            except SerdeError as exc:
                got = type(exc)
            assert got == want, bytes(corrupt).hex()


def test_layout_is_the_shipped_schemas() -> None:
    def bare(schema: Any) -> Any:  # the schema without its docs
        if isinstance(schema, dict):
            return {k: bare(v) for k, v in schema.items() if k != "doc"}
        return [bare(v) for v in schema] if isinstance(schema, list) else schema

    schema = json.loads((resources.files("schemas") / "avro" / "tensor_record.avsc").read_text(encoding="utf-8"))
    tensor = {
        "type": "record",
        "name": "Tensor",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "dtype", "type": "string"},
            {"name": "shape", "type": {"type": "array", "items": "int"}},
            {"name": "data", "type": "bytes"},
        ],
    }
    assert [(f["name"], bare(f["type"])) for f in schema["fields"]] == [
        ("job_id", "string"),
        ("record_id", "string"),
        ("seq", "long"),
        ("model", "string"),
        ("model_version", "string"),
        ("tensors", {"type": "array", "items": tensor}),
        ("attributes", {"type": "map", "values": "string"}),
        ("timestamps", {"type": "map", "values": "long"}),
    ]
