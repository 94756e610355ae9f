"""read_result_head against the reference, serde.decode (fastavro): the same leading fields, for
results written by serde.encode and by the GPU worker's encoder, and a typed error for any of them
cut short."""

from __future__ import annotations

import io
import json
import random
from dataclasses import replace
from importlib import resources
from typing import Any

import numpy as np
import pytest
from fastavro import parse_schema, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from schemas import InferenceResult, RawText, Tensor, decode, encode
from schemas.errors import SerdeError, TruncatedRecordError
from schemas.inference_result_bytes import (
    V1_HEADER,
    ResultBody,
    ResultHead,
    read_result_body,
    read_result_head,
    read_result_usage,
)
from schemas.result_encoding import NOT_GENERATION, ResultEncoder, RowTensor, avro_string, encoded_ids, encoded_maps
from schemas.serde import HEADER_LEN, MAGIC

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
        ("text", "string"),
        ("finish_reason", "string"),
        ("completion_tokens", "int"),
        ("cached_prompt_tokens", "int"),
    ]
    defaults = [f.get("default") for f in schema["fields"][-4:]]
    assert defaults == ["", "", 0, 0] and NOT_GENERATION == b"\x00\x00\x00\x00"


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


def v1_written(result: InferenceResult) -> bytes:
    """The result as a worker of schemas/avro/history/inference_result.v1.avsc wrote it: fastavro
    alone, with that schema and its fingerprint."""
    raw = json.loads(
        (resources.files("schemas") / "avro" / "history" / "inference_result.v1.avsc").read_text(encoding="utf-8")
    )
    parsed = parse_schema(raw, named_schemas={})
    out = io.BytesIO()
    out.write(MAGIC + bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO")))
    fields = {k: v for k, v in result.to_avro().items() if k in {f["name"] for f in raw["fields"]}}
    schemaless_writer(out, parsed, fields)
    return out.getvalue()


def test_v1_results_are_the_current_bytes_without_the_generation_fields_under_v1s_fingerprint() -> None:
    result = CASES[0]
    assert V1_HEADER.hex() == "c30161e0a3c7f5c8b2f9"
    assert v1_written(result)[:HEADER_LEN] == V1_HEADER
    assert v1_written(result) == V1_HEADER + encode(result)[HEADER_LEN:-4]  # what tests/jobs writes as v1


@pytest.mark.parametrize("result", CASES)
def test_a_result_written_under_v1_reads_as_before_with_the_generation_fields_at_their_defaults(
    result: InferenceResult,
) -> None:
    data = v1_written(result)
    assert decode(data, InferenceResult) == result  # the serde's fallback: fastavro resolves v1 to the current
    assert read_result_head(data) == head_of(result)
    body = read_result_body(data)
    assert body is not None and body == read_result_body(encode(result))
    assert read_result_usage(data) == read_result_usage(encode(result))


def test_the_v1_body_read_from_its_bytes_has_the_values_written() -> None:
    body = read_result_body(v1_written(CASES[0]))
    assert body is not None
    assert body.head == ResultHead("job-1", "r1", 0, "minilm", "1")
    assert (body.outputs, body.labels, body.batch_id, body.batch_size) == (
        (("embedding", "float32", (384,)),),
        (),
        "w-1:7",
        64,
    )
    assert body.attributes == {"lang": '"en"'}
    usage = read_result_usage(v1_written(CASES[0]))
    assert usage is not None and (usage.length, usage.engine_us) == (11, 0.0)


GENERATION = InferenceResult(
    "job-g",
    "p1",
    3,
    "tiny-lm",
    "1",
    (),
    "gen-0:4",
    8,
    {"topic": '"cats"'},
    {"submitted": 1_764_822_600_123_456, "inference_start": 100, "inference_end": 900},
    length=12,
    text="Cats sleep — a lot.\n",
    finish_reason="stop",
    completion_tokens=7,
    cached_prompt_tokens=4,
)


def test_a_generation_round_trips_through_the_serde_with_its_text_and_token_counts() -> None:
    back = decode(encode(GENERATION), InferenceResult)
    assert back == GENERATION
    assert (back.text, back.finish_reason, back.completion_tokens, back.cached_prompt_tokens, back.length) == (
        "Cats sleep — a lot.\n",
        "stop",
        7,
        4,
        12,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"text": "x", "finish_reason": "length", "completion_tokens": 0},
        {"text": "", "finish_reason": "stop", "completion_tokens": 0, "cached_prompt_tokens": 0},
        {"text": "ends in nul\x00\x00", "finish_reason": "stop"},
        {"finish_reason": "length", "completion_tokens": 1},
        {"finish_reason": "", "cached_prompt_tokens": 3},
    ],
)
def test_a_generations_body_and_usage_are_left_to_the_whole_decode_and_its_head_still_reads(
    fields: dict[str, Any],
) -> None:
    """Its fields lie past the timestamps, which the body reader skips: it says None (decode it
    whole), as for another writer schema; the leading fields, before them, still read."""
    data = encode(replace(GENERATION, **fields))
    assert read_result_head(data) == ResultHead("job-g", "p1", 3, "tiny-lm", "1")
    assert read_result_body(data) is None
    assert read_result_usage(data) is None


def test_a_result_with_the_generation_fields_at_their_defaults_is_read_from_its_bytes() -> None:
    plain = replace(GENERATION, text="", finish_reason="", completion_tokens=0, cached_prompt_tokens=0)
    data = encode(plain)
    assert data.endswith(b"\x00\x00\x00\x00")
    assert read_result_body(data) == ResultBody(
        ResultHead("job-g", "p1", 3, "tiny-lm", "1"), (), (), (), "gen-0:4", 8, {"topic": '"cats"'}
    )
    usage = read_result_usage(data)
    assert usage is not None and (usage.length, usage.engine_us) == (12, 100.0)
