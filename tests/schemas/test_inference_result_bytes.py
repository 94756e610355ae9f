"""read_result and read_result_head against the reference, serde.decode (fastavro): the same
result, the same errors, for results written by serde.encode and by the GPU worker's encoder."""

from __future__ import annotations

import json
import random
from importlib import resources
from typing import Any

import numpy as np
import pytest

from schemas import InferenceResult, RawText, Tensor, decode, encode
from schemas.errors import NotSingleObjectError, SerdeError, TruncatedRecordError, WrongRecordTypeError
from schemas.inference_result_bytes import ResultHead, read_result, read_result_head
from schemas.result_encoding import ResultEncoder, RowTensor, encoded_ids, encoded_maps
from schemas.serde import HEADER_LEN

CASES = [
    InferenceResult(
        "job-1",
        "r1",
        0,
        "minilm",
        "1",
        (Tensor.from_array("embedding", np.linspace(-1, 1, 384, dtype=np.float32)),),
        "w-1:7",
        64,
        {"lang": '"en"'},
        {"submitted": 1_764_822_600_123_456, "result_produced": 1_764_822_600_223_456},
        (),
        11,
        16,
    ),
    InferenceResult(
        "job-é" * 20,
        "ü" * 300,
        -(2**63),
        "m" * 64,
        "",
        (
            Tensor.from_array("top_index", np.array([3, 1], dtype=np.int64)),
            Tensor.from_array("top_score", np.array([0.9, 0.05], dtype=np.float32)),
            Tensor.from_array("empty", np.zeros((0, 5), dtype=np.int64)),
            Tensor.from_array("grid", np.arange(24, dtype=np.uint8).reshape(2, 3, 4)),
        ),
        "",
        2**31 - 1,
        {"k" * 200: "v" * 5000, "": ""},
        {"a": -1, "b": 2**63 - 1},
        ("cat", "dög"),
        0,
        0,
    ),
    InferenceResult("j", "x", 2**40, "m", "2", (), "b", 1),
]


def gpu_worker_results() -> list[bytes]:
    """Two results as the GPU worker writes them (two timestamp blocks, shared parts joined)."""
    return ResultEncoder("minilm", "3").encode_batch(
        ids=[encoded_ids("job", "a", 0), encoded_ids("job", "b", 1)],
        outputs=[RowTensor("embedding", np.arange(8, dtype=np.float32).reshape(2, 4))],
        labels=None,
        batch_id="w:1",
        lengths=[5, 9],
        padded_length=16,
        maps=[encoded_maps({"n": "5"}, {"submitted": 10}), encoded_maps({}, {"submitted": 11})],
        batch_timestamps={"batch_formed": 12, "result_produced": 13},
    )


@pytest.mark.parametrize("data", [encode(r) for r in CASES] + gpu_worker_results())
def test_reads_what_fastavro_reads(data: bytes) -> None:
    want = decode(data, InferenceResult)
    assert read_result(data) == want
    assert read_result_head(data) == ResultHead(want.job_id, want.record_id, want.seq, want.model, want.model_version)


def test_the_gpu_workers_results_read_with_its_values() -> None:
    first, second = (read_result(d) for d in gpu_worker_results())
    assert (first.record_id, first.length, first.padded_length, first.attributes) == ("a", 5, 16, {"n": "5"})
    assert first.timestamps == {"submitted": 10, "batch_formed": 12, "result_produced": 13}
    np.testing.assert_array_equal(second.arrays()["embedding"], [4, 5, 6, 7])


def test_every_truncation_any_trailing_byte_and_other_records_are_the_typed_errors() -> None:
    data = encode(CASES[1])
    for end in range(HEADER_LEN, len(data)):
        with pytest.raises(TruncatedRecordError):
            read_result(data[:end])
    with pytest.raises(TruncatedRecordError, match="after the end"):
        read_result(data + b"\x00")
    with pytest.raises(TruncatedRecordError):
        read_result_head(data[: HEADER_LEN + 3])
    with pytest.raises(NotSingleObjectError):
        read_result(b"{}")
    with pytest.raises(WrongRecordTypeError):
        read_result(encode(RawText("j", "r", 0, "m", "t", 0, {})))
    assert read_result_head(encode(RawText("j", "r", 0, "m", "t", 0, {}))) is None  # not ours: decode it whole


def test_corrupted_records_read_as_fastavro_reads_them() -> None:
    """Random bytes of valid records overwritten: both readers give the same result, or both a SerdeError."""
    rng = random.Random(11)
    for data in [encode(CASES[0]), encode(CASES[2]), *gpu_worker_results()]:
        for _ in range(800):
            corrupt = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                corrupt[rng.randrange(HEADER_LEN, len(corrupt))] = rng.randrange(256)
            try:
                want: Any = decode(bytes(corrupt), InferenceResult)
            except SerdeError as exc:
                want = type(exc)
            try:
                got: Any = read_result(bytes(corrupt))
            except SerdeError as exc:
                got = type(exc)
            assert got == want, bytes(corrupt).hex()


def test_layout_is_the_shipped_schemas() -> None:
    schema = json.loads((resources.files("schemas") / "avro" / "inference_result.avsc").read_text(encoding="utf-8"))
    types = [(f["name"], f["type"]) for f in schema["fields"]]
    tensor = [(f["name"], f["type"]) for f in types[5][1]["items"]["fields"]]
    assert types[:5] == [
        ("job_id", "string"),
        ("record_id", "string"),
        ("seq", "long"),
        ("model", "string"),
        ("model_version", "string"),
    ]
    assert tensor == [
        ("name", "string"),
        ("dtype", "string"),
        ("shape", {"type": "array", "items": "int"}),
        ("data", "bytes"),
    ]
    assert [(n, t) for n, t in types[6:]] == [
        ("labels", {"type": "array", "items": "string"}),
        ("batch_id", "string"),
        ("batch_size", "int"),
        ("length", "int"),
        ("padded_length", "int"),
        ("attributes", {"type": "map", "values": "string"}),
        ("timestamps", {"type": "map", "values": "long"}),
    ]
