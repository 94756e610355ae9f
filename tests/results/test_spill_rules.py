"""ResultSpill (on disk) and JobOutcome (in memory) keep the same result of each record: one rule,
results.outcome.wins_over, for redelivered copies, newer model versions and retried dead letters."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import numpy as np
import pytest

from kafka_io.records import ConsumedRecord, OutRecord, job_record
from kafka_io.topology import Topics
from results.formats import OutputFormat
from results.outcome import JobOutcome
from results.spill import MEMORY_BYTES, ResultSpill
from schemas import DeadLetter, InferenceResult, RawText, Tensor, encode
from tests.support.item_output import write_items, write_spill


def result(topic: str, job_id: str, i: int, version: str) -> OutRecord:
    embedding = Tensor.from_array("embedding", np.full(4, i, np.float32))
    value = encode(InferenceResult(job_id, f"r{i}", i, "tiny", version, (embedding,), "b", 1))
    return job_record(topic, value, job_id, f"r{i}")


def dead(topics: Topics, job_id: str, i: int, submitted: int = 1) -> OutRecord:
    raw = encode(RawText(job_id, f"r{i}", i, "tiny", "x", submitted))
    letter = DeadLetter.from_error(
        "preprocess", ValueError("bad"), (topics.raw_text, 0, i, raw), job_id=job_id, record_id=f"r{i}", model="tiny"
    )
    return job_record(topics.dead_letters, encode(letter), job_id, f"r{i}")


def consumed(records: list[OutRecord]) -> list[ConsumedRecord]:
    return [ConsumedRecord(r.topic, 0, i, r.value or b"", r.key, tuple(r.headers)) for i, r in enumerate(records)]


@pytest.mark.parametrize("memory_bytes", [MEMORY_BYTES, 0], ids=["in-memory", "sqlite"])
def test_spill_and_outcome_keep_the_same_result_of_each_record(memory_bytes: int) -> None:
    topics = Topics(namespace="spill-rules")
    records = [
        result(topics.results, "job-r", 0, "1"),
        result(topics.results, "job-r", 0, "2"),  # a newer version replaces the first
        result(topics.results, "job-r", 0, "1"),  # an older one does not, and is no duplicate
        result(topics.results, "job-r", 0, "2"),  # the kept version again: a duplicate
        dead(topics, "job-r", 1),
        result(topics.results, "job-r", 1, "1"),  # a retried record that succeeded is not dead
        dead(topics, "job-r", 2),
        dead(topics, "job-r", 2),  # a dead letter once
        result(topics.results, "job-r", 3, "10"),
        result(topics.results, "job-r", 3, "9"),  # numeric order: 9 < 10
        result(topics.results, "job-x", 4, "1"),  # another job's
    ]
    outcome = JobOutcome("job-r")
    outcome.add(consumed(records), topics)
    with ResultSpill("job-r", memory_bytes=memory_bytes) as spill:
        spill.add(consumed(records), topics)
        assert (spill.done, spill.failed, spill.duplicates) == (outcome.done, outcome.failed, outcome.duplicates)
        assert (spill.done, spill.failed, spill.duplicates) == (4, 1, 1)
        kept = [(item.record_id, getattr(item, "model_version", None)) for item in spill.ordered()]
    assert kept == [(item.record_id, getattr(item, "model_version", None)) for item in outcome.ordered()]
    assert kept == [("r0", "2"), ("r1", "1"), ("r2", None), ("r3", "10")]


@pytest.mark.parametrize("memory_bytes", [MEMORY_BYTES, 0], ids=["in-memory", "sqlite"])
def test_a_spilled_result_comes_back_equal_to_the_one_read_field_for_field(memory_bytes: int) -> None:
    """The spill keeps what a result was decoded into, not its Avro bytes: what it writes out must
    still be the whole result (labels, attributes, stage times, lengths, every output)."""
    topics = Topics(namespace="spill-fields")
    rng = np.random.default_rng(5)
    sent = [
        InferenceResult(
            "job-f",
            f"r{i}",
            i,
            "tiny",
            "3",
            (
                Tensor.from_array("top_index", np.array([2, 0], np.int64)),
                Tensor.from_array("top_score", rng.random(2, dtype=np.float32)),
                Tensor.from_array("hidden", rng.standard_normal((2, 3), dtype=np.float32)),
            ),
            f"w.{i}",
            2,
            {"lang": '"fr"', "n": str(i)},
            {"submitted": 1_700_000_000_000_000 + i, "inference_end": 1_700_000_000_500_000},
            ("cat", "dog"),
            7 + i,
            16,
        )
        for i in (1, 0)  # read out of order
    ]
    records = [
        ConsumedRecord(topics.results, 0, n, encode(r), f"job-f/{r.record_id}".encode()) for n, r in enumerate(sent)
    ]
    with ResultSpill("job-f", memory_bytes=memory_bytes) as spill:
        spill.add(records, topics)
        assert list(spill.ordered()) == [sent[1], sent[0]]
        assert spill.example() == sent[1]


@pytest.mark.parametrize("memory_bytes", [MEMORY_BYTES, 0], ids=["in-memory", "sqlite"])
@pytest.mark.parametrize("fmt", [OutputFormat.JSONL])
def test_results_written_from_their_bytes_are_the_files_decoded_results_give(
    memory_bytes: int, fmt: OutputFormat, tmp_path: Path
) -> None:
    """The window writer (results/rows.py) against the per-record one (tests/support/item_output.py),
    byte for byte: embeddings with and without attributes, a result of another layout, a dead letter."""
    topics = Topics(namespace="spill-bulk")
    rng = np.random.default_rng(9)

    def embedding(i: int, dim: int = 8, attributes: dict[str, str] | None = None) -> InferenceResult:
        vector = rng.standard_normal(dim, dtype=np.float32) * 10.0 ** rng.integers(-6, 2)
        return InferenceResult(
            "job-b", f"r{i}", i, "tiny", "1", (Tensor.from_array("embedding", vector),), "w.0", 4, attributes or {}, {}
        )

    sent = [embedding(i, attributes={"n": str(i)} if i % 3 else None) for i in range(7)]
    sent.append(embedding(8, dim=5))  # another layout, as another model version's would be
    records = [
        ConsumedRecord(topics.results, 0, n, encode(r), f"job-b/{r.record_id}".encode()) for n, r in enumerate(sent)
    ]
    records += consumed([dead(topics, "job-b", 7)])
    decoded_path, bulk_path = tmp_path / f"decoded.{fmt}", tmp_path / f"bulk.{fmt}"
    with ResultSpill("job-b", memory_bytes=memory_bytes) as spill:
        spill.add(records, topics)
        assert spill.results == 8 and spill.dead == 1
        write_items(spill.ordered(), spill.example(), decoded_path, io.StringIO(), fmt)
        write_spill(spill, bulk_path, fmt)
    if fmt is OutputFormat.JSONL:
        assert bulk_path.read_bytes() == decoded_path.read_bytes()
        assert len(bulk_path.read_bytes().splitlines()) == 9
    else:
        import pyarrow as pa

        assert pa.ipc.open_file(bulk_path).read_all().equals(pa.ipc.open_file(decoded_path).read_all())


@pytest.mark.parametrize("memory_bytes", [MEMORY_BYTES, 0], ids=["in-memory", "sqlite"])
def test_the_rules_hold_where_results_are_read_in_bulk(memory_bytes: int, tmp_path: Path) -> None:
    """Batches large enough for schemas/inference_result_bulk.py, mixed as a reader meets them: two
    submissions of one job id (only the asked one counts, by header, or by its stamp where a
    result has no header), two model versions, redelivered copies, dead letters retried into
    results, another job's results. The spill keeps what JobOutcome (fastavro) keeps, and writes
    it as the per-record writer does."""
    topics = Topics(namespace="spill-bulk-rules")
    asked, other = 1_700_000_000_000_001, 1_700_000_000_000_002
    rng = np.random.default_rng(3)

    def sent(i: int, version: str, submission: int, *, header: bool = True, job: str = "job-m") -> OutRecord:
        vector = rng.standard_normal(6, dtype=np.float32)
        value = encode(
            InferenceResult(
                job,
                f"r{i}",
                i,
                "tiny",
                version,
                (Tensor.from_array("embedding", vector),),
                f"w.{i // 40}",
                40,
                timestamps={"submitted": submission},
            )
        )
        return job_record(topics.results, value, job, f"r{i}", submission if header else None)

    records = [sent(i, "1", asked) for i in range(120)]
    records += [sent(i, "1", other) for i in range(0, 120, 2)]  # the other submission's, by header
    records += [sent(i, "1", other, header=False) for i in range(1, 120, 4)]  # by stamp alone
    records += [sent(i, "2", asked) for i in range(0, 120, 3)]  # a newer version wins
    records += [sent(i, "1", asked) for i in range(0, 120, 5)]  # redelivered
    records += [sent(i, "1", asked, job="job-n") for i in range(60)]  # another job's
    records += [dead(topics, "job-m", i, asked) for i in range(120, 140)]
    records += [dead(topics, "job-m", i, other) for i in range(140, 150)]  # the other submission's
    records += [sent(i, "1", asked) for i in range(120, 140, 2)]  # retried dead letters that succeeded
    random.Random(7).shuffle(records)
    outcome = JobOutcome("job-m", submission=asked)
    outcome.add(consumed(records), topics)
    decoded_path, bulk_path = tmp_path / "decoded.jsonl", tmp_path / "bulk.jsonl"
    with ResultSpill("job-m", submission=asked, memory_bytes=memory_bytes) as spill:
        spill.add(consumed(records), topics)
        assert (spill.results, spill.dead, spill.duplicates) == (130, 10, outcome.duplicates)
        assert spill.done == outcome.done
        kept = [(item.record_id, getattr(item, "model_version", None)) for item in spill.ordered()]
        write_items(spill.ordered(), spill.example(), decoded_path, io.StringIO(), OutputFormat.JSONL)
        write_spill(spill, bulk_path, OutputFormat.JSONL)
    assert kept == [(item.record_id, getattr(item, "model_version", None)) for item in outcome.ordered()]
    assert kept[:4] == [("r0", "2"), ("r1", "1"), ("r2", "1"), ("r3", "2")]
    assert bulk_path.read_bytes() == decoded_path.read_bytes()


@pytest.mark.parametrize("memory_bytes", [MEMORY_BYTES, 0], ids=["in-memory", "sqlite"])
@pytest.mark.parametrize("fmt", [OutputFormat.JSONL, OutputFormat.PARQUET, OutputFormat.ARROW])
def test_a_result_that_cannot_be_written_is_an_error_row_and_the_rest_is_written(
    memory_bytes: int, fmt: OutputFormat, tmp_path: Path
) -> None:
    """Anyone may write to the results topic: a result whose data does not fit its own dtype and
    shape, one of 65 dimensions, or labels without the classifier's outputs failed the whole
    output. Each is now a row with an error of stage `results`; every other record is written."""
    topics = Topics(namespace="spill-unwritable")

    def result(i: int, outputs: tuple[Tensor, ...], labels: tuple[str, ...] = ()) -> OutRecord:
        value = encode(InferenceResult("job-u", f"r{i}", i, "tiny", "1", outputs, "b", 1, labels=labels))
        return job_record(topics.results, value, "job-u", f"r{i}")

    good = [
        result(i, (Tensor.from_array("embedding", np.full(4, i, np.float32)),)) for i in (1, 2, 4, 6, *range(10, 40))
    ]
    bad = [
        result(0, (Tensor("embedding", "float32", (4,), bytes(12)),)),  # 12 bytes for 4 floats
        result(3, (Tensor("embedding", "float32", (1,) * 65, bytes(4)),)),  # more dimensions than numpy's 64
        result(5, (Tensor("embedding", "float32", (4,), bytes(16)),), labels=("cat",)),  # labels, no top_index
    ]
    out = tmp_path / f"out.{fmt.value}"
    with ResultSpill("job-u", memory_bytes=memory_bytes) as spill:
        spill.add(consumed(bad + good), topics)  # the lowest record id (r0) is bad: the columns come from r1
        write_spill(spill, out, fmt)
    if fmt is OutputFormat.JSONL:
        lines = [json.loads(line) for line in out.read_text().splitlines()]
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(out) if fmt is OutputFormat.PARQUET else pa.ipc.open_file(out).read_all()
        lines = table.to_pylist()
    assert [line["id"] for line in lines] == [f"r{i}" for i in (0, 1, 2, 3, 4, 5, 6, *range(10, 40))]
    errors = {line["id"]: line["error"] for line in lines if line.get("error")}
    assert sorted(errors) == ["r0", "r3", "r5"]
    assert all(e["stage"] == "results" and "cannot be written" in e["message"] for e in errors.values())
    assert [list(line["embedding"]) for line in lines if line["id"] == "r10"] == [[10.0] * 4]
