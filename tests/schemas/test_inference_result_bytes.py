"""read_result_head against the reference, serde.decode (fastavro): the same leading fields, for
results written by serde.encode and by the GPU worker's encoder, and a typed error for any of them
cut short."""

from __future__ import annotations

import json
import random
from importlib import resources
from typing import Any

import numpy as np
import pytest

from schemas import InferenceResult, RawText, Tensor, decode, encode
from schemas.errors import SerdeError, TruncatedRecordError
from schemas.inference_result_bytes import ResultHead, read_result_head, read_result_usage
from schemas.result_encoding import ResultEncoder, RowTensor, avro_string, encoded_ids, encoded_maps
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


def head_of(result: InferenceResult) -> ResultHead:
    return ResultHead(result.job_id, result.record_id, result.seq, result.model, result.model_version)


@pytest.mark.parametrize("data", [encode(r) for r in CASES] + gpu_worker_results())
def test_reads_the_leading_fields_fastavro_reads(data: bytes) -> None:
    assert read_result_head(data) == head_of(decode(data, InferenceResult))


def test_the_gpu_workers_results_read_with_their_ids_and_version() -> None:
    assert [read_result_head(d) for d in gpu_worker_results()] == [
        ResultHead("job", "a", 0, "minilm", "3"),
        ResultHead("job", "b", 1, "minilm", "3"),
    ]


def test_leading_fields_cut_short_are_the_typed_error_and_other_records_are_left_to_fastavro() -> None:
    record = CASES[1]
    data = encode(record)
    head_end = HEADER_LEN + len(
        encoded_ids(record.job_id, record.record_id, record.seq)
        + avro_string(record.model)
        + avro_string(record.model_version)
    )
    assert read_result_head(data[:head_end]) == head_of(record)
    for end in range(HEADER_LEN, head_end):  # every cut inside the five fields, the last string's included
        with pytest.raises(TruncatedRecordError):
            read_result_head(data[:end])
    assert read_result_head(encode(RawText("j", "r", 0, "m", "t", 0, {}))) is None  # decode it whole
    assert read_result_head(b"{}") is None


def test_corrupted_records_read_as_fastavro_reads_their_leading_fields() -> None:
    """Random bytes of the five fields overwritten: where fastavro reads the record, the same fields
    (or the typed error: a corrupt length may run past the end); where it cannot, the leading
    fields may still read, which is why a count is checked by the decode of `results`."""
    rng = random.Random(11)
    for data in [encode(CASES[0]), encode(CASES[2]), *gpu_worker_results()]:
        for _ in range(800):
            corrupt = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                corrupt[rng.randrange(HEADER_LEN, min(len(corrupt), HEADER_LEN + 40))] = rng.randrange(256)
            try:
                want: Any = head_of(decode(bytes(corrupt), InferenceResult))
            except SerdeError:
                continue
            try:
                got: Any = read_result_head(bytes(corrupt))
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


def timed_results() -> list[bytes]:
    """Results of one executed batch of three, with its engine span (800 us), as the GPU worker writes them."""
    return ResultEncoder("minilm", "3").encode_batch(
        ids=[encoded_ids("job", r, i) for i, r in enumerate("abc")],
        outputs=[RowTensor("embedding", np.arange(12, dtype=np.float32).reshape(3, 4))],
        labels=None,
        batch_id="w:2",
        lengths=[5, 9, 2],
        padded_length=16,
        maps=[encoded_maps({"n": "5"}, {"submitted": 10}), encoded_maps({}, {}), encoded_maps({}, {"submitted": 1})],
        batch_timestamps={
            "batch_formed": 12,
            "inference_start": 1_000,
            "inference_end": 1_800,
            "result_produced": 2_000,
        },
    )


@pytest.mark.parametrize("data", [encode(r) for r in CASES] + gpu_worker_results() + timed_results())
def test_reads_the_usage_fastavro_reads(data: bytes) -> None:
    """A result's length and its share of its batch's engine span, from its bytes, as from the decoded result."""
    result = decode(data, InferenceResult)
    usage = read_result_usage(data)
    assert usage is not None and usage.length == result.length
    start, end = result.timestamps.get("inference_start"), result.timestamps.get("inference_end")
    expected = (end - start) / result.batch_size if start is not None and end is not None else 0.0
    assert usage.engine_us == pytest.approx(expected)


def test_a_batchs_engine_span_is_shared_by_its_records() -> None:
    usages = [read_result_usage(d) for d in timed_results()]
    assert [u.length for u in usages if u] == [5, 9, 2]
    assert sum(u.engine_us for u in usages if u) == pytest.approx(800)
