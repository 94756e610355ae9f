"""The pipeline end to end on the real broker: real worker processes, the real CLI, the tiny model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from jobs.launch.runner import WaitRules, watch_job
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord
from schemas import DeadLetter, RawText, Tensor, TensorRecord, decode, encode
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline, submit
from tests.support.records import raw_texts_in
from tests.support.tiny_model import TinyModel


def test_a_job_flows_end_to_end_with_one_result_per_record_in_input_order(
    pipeline: RunningPipeline, tiny: TinyModel, reference_ids: Callable[[str], list[int]], tmp_path: Path
) -> None:
    rows = example_lines(80)
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "8")
    job_id = submit(pipeline, write_jsonl(tmp_path / "in.jsonl", rows))
    watch_job(
        pipeline.settings, pipeline.topics, job_id, len(rows), WaitRules(check=pipeline.check_workers, timeout_s=120)
    )

    out = tmp_path / "out.jsonl"
    done = pipeline.cli("results", job_id, "-o", str(out))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == [r["id"] for r in rows]
    for line, row in zip(lines, rows, strict=True):
        assert line["job_id"] == job_id and line["model"] == "tiny"
        expected = tiny.expected(np.array(reference_ids(row["text"])))
        np.testing.assert_allclose(line["embedding"], expected, atol=1e-6)

    shown = pipeline.cli("profile", job_id)
    assert shown.returncode == 0, shown.stderr
    assert "bottleneck: " in shown.stdout and "engine busy fraction" in shown.stdout
    assert "to go faster: " in shown.stdout and "(slowest stage: " not in shown.stdout  # says why
    report = json.loads(pipeline.cli("profile", job_id, "--json").stdout)
    assert "to go faster: " in report["bottleneck_reason"]
    assert report["records"] == len(rows) and report["lane"] == "bulk" and "lane: bulk" in shown.stdout
    assert set(report["stages"]) == {
        "wait for preprocess",
        "preprocess",
        "wait for inference",
        "batching",
        "inference",
        "postprocess",
    }
    assert 0 < report["engine_busy_fraction"] <= 1
    assert max(report["batch_sizes"], key=int) and report["mean_batch_size"] <= 8


def test_a_malformed_file_is_rejected_with_file_and_line_and_nothing_is_produced(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"id": "a", "text": "fine"}\n{"id": "b", "text": \n{"id": "c", "text": ""}\n')
    done = pipeline.cli("submit", str(bad), "--model", "tiny")
    assert done.returncode == 2
    assert f"{bad}:2: invalid JSON" in done.stderr
    assert f"{bad}:3: text is empty" in done.stderr
    assert "nothing was submitted" in done.stderr

    skipped = pipeline.cli("submit", str(bad), "--model", "tiny", "--skip-invalid")
    assert skipped.returncode == 0, skipped.stderr
    assert f"skipped: {bad}:2: invalid JSON" in skipped.stderr
    records = raw_texts_in(read_topics(pipeline.settings, [pipeline.topics.raw_text]))
    assert [(r.job_id, r.record_id) for r in records] == [(skipped.stdout.strip(), "a")]


def test_poison_records_are_dead_lettered_while_the_rest_complete(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    rows = example_lines(30)
    job_id = submit(pipeline, write_jsonl(tmp_path / "in.jsonl", rows), "--job-id", "job-poison")
    topics = pipeline.topics
    ids = np.array([101, 2000, 102])
    good = encode(RawText(job_id, "x", 0, "tiny", "text", 0))
    tensor = Tensor.from_array("input_ids", ids)
    produce_all(
        make_producer(pipeline.settings),
        [
            OutRecord(topics.raw_text, b"\x00garbage that is not avro"),
            OutRecord(topics.raw_text, good[:2] + b"\xff" * 8 + good[10:]),  # unknown schema fingerprint
            OutRecord(topics.raw_text, good[: len(good) - 6]),  # truncated body
            OutRecord(topics.raw_text, encode(RawText(job_id, "unknown-model", 30, "nope", "text", 0))),
            OutRecord(topics.raw_text, encode(RawText(job_id, "blank", 32, "tiny", " \t\n ", 0))),
            OutRecord(topics.raw_text, encode(RawText(job_id, "ten-mb", 33, "tiny", "lorem ipsum " * 900_000, 0))),
            OutRecord(
                topics.tensors("tiny"),
                encode(
                    TensorRecord(
                        job_id, "wrong-shape", 34, "tiny", "1", (Tensor("input_ids", "int64", (1, 3), tensor.data),)
                    )
                ),
            ),
            OutRecord(
                topics.tensors("tiny"),
                encode(
                    TensorRecord(
                        job_id,
                        "wrong-dtype",
                        31,
                        "tiny",
                        "1",
                        (Tensor.from_array("input_ids", ids.astype(np.float32)),),
                    )
                ),
            ),
        ],
    )
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    outcome, _ = watch_job(
        pipeline.settings, topics, job_id, len(rows) + 5, WaitRules(check=pipeline.check_workers, timeout_s=120)
    )
    # a 10 MB text is a fine input: cut to the model's length, not refused
    assert sorted(outcome.results) == sorted([r["id"] for r in rows] + ["ten-mb"])
    assert {rid: (d.stage, d.error_type) for rid, d in outcome.dead.items()} == {
        "unknown-model": ("preprocess", "ModelNotFoundError"),
        "blank": ("preprocess", "ValueError"),
        "wrong-dtype": ("inference", "TensorFormatError"),
        "wrong-shape": ("inference", "TensorFormatError"),
    }
    letters = [decode(m.value, DeadLetter) for m in read_topics(pipeline.settings, [topics.dead_letters])]
    unattributed = sorted(d.error_type for d in letters if d.job_id is None)
    assert unattributed == ["NotSingleObjectError", "TruncatedRecordError", "UnknownSchemaError"]
    assert any(d.payload.startswith(b"\x00garbage") for d in letters)
    for w in pipeline.workers:
        assert w.process.poll() is None  # poison never kills a worker
