"""A generation's results in the outputs users read (JSON Lines, Parquet, Arrow) and in a job's usage,
and results written under schema v1 (before the generation fields) read as before."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from kafka_io.records import ConsumedRecord
from kafka_io.topology import Topics
from results.columnar import ColumnarShapeError
from results.formats import OutputFormat
from results.outcome import JobOutcome
from results.spill import MEMORY_BYTES, ResultSpill
from results.usage import Usage
from schemas import DeadLetter, InferenceResult, RawText, Tensor, encode
from tests.support.item_output import write_items, write_spill

TOPICS = Topics(namespace="generation-results")
V1_HEADER = b"\xc3\x01" + bytes.fromhex("61e0a3c7f5c8b2f9")  # schemas/avro/history/inference_result.v1.avsc


def generation(i: int, text: str, finish_reason: str, attributes: dict[str, str] | None = None) -> InferenceResult:
    """Prompt i of job-g: 10 + i prompt tokens, 3 + i generated, i of the prompt's from a shared prefix."""
    return InferenceResult(
        "job-g",
        f"p{i}",
        i,
        "tiny-lm",
        "1",
        (Tensor.from_array("completion_ids", np.arange(3 + i, dtype=np.int32)),),
        "gen-0:1",
        4,
        attributes or {},
        {"submitted": 1, "inference_start": 100, "inference_end": 500, "result_produced": 1_764_822_600_000_000},
        length=10 + i,
        text=text,
        finish_reason=finish_reason,
        completion_tokens=3 + i,
        cached_prompt_tokens=i,
    )


RESULTS = [
    generation(0, "Hello there.", "stop", {"topic": '"greeting"', "n": "5"}),
    generation(1, "A long answer that was cut", "length"),
    generation(2, "", "stop"),  # an end-of-sequence token first: an empty completion is still a generation
]
# its payload the prompt it failed on, which places it in the job's input order
PROMPT = encode(RawText("job-g", "p3", 3, "tiny-lm", "a prompt", 1))
LETTER = DeadLetter(
    "preprocess", "PromptTooLongError", "too long", "raw.text", 0, 9, PROMPT, 1, "job-g", "p3", "tiny-lm"
)

LINES = [
    {
        "id": "p0",
        "job_id": "job-g",
        "model": "tiny-lm",
        "text": "Hello there.",
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "cached_prompt_tokens": 0},
        "model_version": "1",
        "attributes": {"topic": "greeting", "n": 5},
    },
    {
        "id": "p1",
        "job_id": "job-g",
        "model": "tiny-lm",
        "text": "A long answer that was cut",
        "finish_reason": "length",
        "usage": {"prompt_tokens": 11, "completion_tokens": 4, "cached_prompt_tokens": 1},
        "model_version": "1",
    },
    {
        "id": "p2",
        "job_id": "job-g",
        "model": "tiny-lm",
        "text": "",
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "cached_prompt_tokens": 2},
        "model_version": "1",
    },
    {
        "id": "p3",
        "job_id": "job-g",
        "model": "tiny-lm",
        "error": {"stage": "preprocess", "type": "PromptTooLongError", "message": "too long"},
    },
]


def consumed(values: list[tuple[str, bytes]]) -> list[ConsumedRecord]:
    return [ConsumedRecord(topic, 0, n, value, None) for n, (topic, value) in enumerate(values)]


def spilled(results: list[bytes], memory_bytes: int, job: str = "job-g") -> ResultSpill:
    spill = ResultSpill(job, memory_bytes=memory_bytes)
    spill.add(consumed([(TOPICS.results, value) for value in results]), TOPICS)
    return spill


def test_a_generation_is_a_json_line_of_its_text_finish_reason_and_tokens() -> None:
    out = io.StringIO()
    assert write_items([*RESULTS, LETTER], RESULTS[0], None, out) == 4
    assert [json.loads(line) for line in out.getvalue().splitlines()] == LINES


@pytest.mark.parametrize("memory_bytes", [MEMORY_BYTES, 0], ids=["in-memory", "sqlite"])
def test_generations_written_from_their_bytes_are_the_same_lines(memory_bytes: int, tmp_path: Path) -> None:
    """`results` and `run` write from the records' bytes: a generation's are decoded whole there
    (the byte readers leave it), the lines are the same, and a window of them is no special case."""
    many = [generation(i, f"completion {i}", "stop") for i in range(4, 40)]
    with spilled([encode(r) for r in [*RESULTS, *many]], memory_bytes) as spill:
        spill.add(consumed([(TOPICS.dead_letters, encode(LETTER))]), TOPICS)
        assert (spill.results, spill.dead) == (39, 1)
        write_spill(spill, tmp_path / "out.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert lines[:4] == LINES
    assert lines[39] == {
        "id": "p39",
        "job_id": "job-g",
        "model": "tiny-lm",
        "text": "completion 39",
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 49, "completion_tokens": 42, "cached_prompt_tokens": 39},
        "model_version": "1",
    }


@pytest.mark.parametrize("fmt", [OutputFormat.PARQUET, OutputFormat.ARROW])
def test_a_generation_is_typed_columns_of_its_text_and_tokens(fmt: OutputFormat, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / f"out.{fmt.value}"
    with spilled([encode(r) for r in RESULTS], MEMORY_BYTES) as spill:
        spill.add(consumed([(TOPICS.dead_letters, encode(LETTER))]), TOPICS)
        assert write_spill(spill, out, fmt) == 4
    table = pq.read_table(out) if fmt is OutputFormat.PARQUET else pa.ipc.open_file(out).read_all()
    assert [(f.name, str(f.type)) for f in table.schema] == [
        ("id", "string"),
        ("job_id", "string"),
        ("model", "string"),
        ("text", "string"),
        ("finish_reason", "string"),
        ("prompt_tokens", "int64"),
        ("completion_tokens", "int64"),
        ("cached_prompt_tokens", "int64"),
        ("model_version", "string"),
        ("reused", "bool"),
        ("error", "struct<stage: string, type: string, message: string>"),
        ("attributes", "string"),
    ]
    rows = table.to_pylist()
    assert [(r["text"], r["finish_reason"]) for r in rows] == [
        ("Hello there.", "stop"),
        ("A long answer that was cut", "length"),
        ("", "stop"),
        (None, None),
    ]
    assert [(r["prompt_tokens"], r["completion_tokens"], r["cached_prompt_tokens"]) for r in rows] == [
        (10, 3, 0),
        (11, 4, 1),
        (12, 5, 2),
        (None, None, None),
    ]
    assert rows[0]["attributes"] == '{"n": 5, "topic": "greeting"}' and rows[3]["error"]["type"] == "PromptTooLongError"


def test_a_generation_in_an_embedding_jobs_table_is_refused_by_name(tmp_path: Path) -> None:
    embedding = InferenceResult(
        "job-g", "e0", 0, "m", "1", (Tensor.from_array("embedding", np.ones(4, np.float32)),), "b", 1
    )
    with pytest.raises(
        ColumnarShapeError, match="has outputs a generation's text where the job's first result had embedding\\[4\\]"
    ):
        write_items([embedding, RESULTS[0]], embedding, tmp_path / "out.parquet", io.StringIO(), OutputFormat.PARQUET)
    assert not (tmp_path / "out.parquet").exists()


def test_a_jobs_usage_counts_the_tokens_its_generations_produced() -> None:
    values = [encode(r) for r in RESULTS]
    usage = Usage()
    for value in values:
        usage.add_bytes(value)
    assert (usage.records, usage.length, usage.completion_tokens) == (3, 33, 12)
    assert usage.engine_us == pytest.approx(300.0)  # each result's share of its 400 us batch of 4
    assert usage.to_dict("text") == {
        "records": 3,
        "input_tokens": 33,
        "completion_tokens": 12,
        "reused_records": 0,
        "engine_seconds": 0.0003,
    }
    assert usage.text("text") == "3 records, 33 input tokens, 12 completion tokens, 0.00 engine-s"
    outcome = JobOutcome("job-g", keep_results=False, usage=Usage())  # status: the heads read from bytes
    outcome.add(consumed([(TOPICS.results, v) for v in values]), TOPICS)
    assert outcome.usage is not None and (outcome.usage.records, outcome.usage.completion_tokens) == (3, 12)


def test_an_embedding_jobs_usage_has_no_completion_tokens() -> None:
    usage = Usage()
    usage.add_bytes(encode(InferenceResult("j", "r", 0, "m", "1", (), "b", 1, length=7)))
    assert usage.to_dict("text") == {"records": 1, "input_tokens": 7, "reused_records": 0, "engine_seconds": 0.0}


def as_v1(value: bytes) -> bytes:
    """A result as a GPU worker of schema v1 wrote it: v1's fingerprint, no generation fields
    (tests/schemas/test_inference_result_bytes.py checks this against fastavro's v1 writer)."""
    return V1_HEADER + value[10:-4]


def embeddings(n: int) -> list[InferenceResult]:
    return [
        InferenceResult(
            "job-e",
            f"r{i:02}",
            i,
            "minilm",
            "1",
            (Tensor.from_array("embedding", np.full(3, i / 4, np.float32)),),
            "w:0",
            n,
            {"k": str(i)} if i % 2 else {},
            {"inference_start": 0, "inference_end": 40 * n},
            length=5,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("memory_bytes", [MEMORY_BYTES, 0], ids=["in-memory", "sqlite"])
@pytest.mark.parametrize("fmt", [OutputFormat.JSONL, OutputFormat.PARQUET])
def test_results_written_under_v1_are_written_out_as_before(
    memory_bytes: int, fmt: OutputFormat, tmp_path: Path
) -> None:
    """A job whose results came from workers of both versions (an upgrade mid-job): the same lines
    and rows as if all were current."""
    sent = embeddings(40)
    values = [as_v1(encode(r)) if i % 3 else encode(r) for i, r in enumerate(sent)]
    old, new = tmp_path / f"mixed.{fmt.value}", tmp_path / f"current.{fmt.value}"
    with spilled(values, memory_bytes, "job-e") as spill:
        assert spill.results == 40
        write_spill(spill, old, fmt)
    with spilled([encode(r) for r in sent], memory_bytes, "job-e") as spill:
        write_spill(spill, new, fmt)
    if fmt is OutputFormat.JSONL:
        assert old.read_bytes() == new.read_bytes()
        lines = [json.loads(line) for line in old.read_text().splitlines()]
        assert lines[1] == {
            "id": "r01",
            "job_id": "job-e",
            "model": "minilm",
            "embedding": [0.25, 0.25, 0.25],
            "model_version": "1",
            "attributes": {"k": 1},
        }
        assert [line["embedding"][0] for line in lines[:4]] == [0.0, 0.25, 0.5, 0.75]
    else:
        import pyarrow.parquet as pq

        assert pq.read_table(old).equals(pq.read_table(new))
        assert pq.read_table(old).column("embedding").to_pylist()[2] == [0.5, 0.5, 0.5]


def test_results_written_under_v1_are_counted_with_their_usage() -> None:
    values = [as_v1(encode(r)) for r in embeddings(20)]
    counted = JobOutcome("job-e", keep_results=False, usage=Usage())
    counted.add(consumed([(TOPICS.results, v) for v in values]), TOPICS)
    decoded = JobOutcome("job-e")
    decoded.add(consumed([(TOPICS.results, v) for v in values]), TOPICS)
    assert counted.done == decoded.done == 20
    assert counted.usage is not None
    assert (counted.usage.records, counted.usage.length, counted.usage.completion_tokens) == (20, 100, 0)
    assert counted.usage.engine_us == pytest.approx(800.0)
    assert decoded.results["r03"].text == "" and decoded.results["r03"].finish_reason == ""


def test_a_kept_input_column_named_like_a_generation_field_comes_back_as_input_name() -> None:
    import pyarrow as pa

    from results.kept_columns import KeptColumns
    from results.outcome import to_json

    kept = KeptColumns(pa.schema([("text", pa.string()), ("usage", pa.int64())]))
    result = generation(0, "an answer", "stop", {"text": '"the prompt"', "usage": "3"})
    assert to_json(result, kept) == {
        "id": "p0",
        "job_id": "job-g",
        "model": "tiny-lm",
        "text": "an answer",
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "cached_prompt_tokens": 0},
        "model_version": "1",
        "input.text": "the prompt",
        "input.usage": 3,
    }
