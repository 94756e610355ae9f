"""Packs (#41) are nearline's own way to write raw.text; any Avro producer's single RawText records
still get their results, beside a packed submission, on the real workers and broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from jobs.launch.runner import WaitRules, watch_job
from jobs.submit import pipeline_topics
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord
from kafka_io.topics import ensure_topics
from schemas import RawText, encode
from schemas.packs import kind_of
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline, follow_until, submit
from tests.support.tiny_model import TinyModel


def test_single_raw_records_of_a_foreign_producer_get_their_results_beside_a_packed_job(
    pipeline: RunningPipeline, tiny: TinyModel, reference_ids: Callable[[str], list[int]], tmp_path: Path
) -> None:
    topics = pipeline.topics
    ensure_topics(pipeline.settings, pipeline_topics(topics, "tiny"))
    texts = [row["text"] for row in example_lines(25)]
    # as any Avro producer writes them: one record a message, no key, none of nearline's headers
    foreign = [
        OutRecord(topics.raw_text, encode(RawText("foreign", f"f{i}", i, "tiny", t, 1))) for i, t in enumerate(texts)
    ]
    produce_all(make_producer(pipeline.settings), foreign)
    rows = example_lines(40)
    packed = submit(pipeline, write_jsonl(tmp_path / "in.jsonl", rows))
    assert any(kind_of(m.value) == "RawTextPack" for m in read_topics(pipeline.settings, [topics.raw_text]))
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "8")

    watch_job(pipeline.settings, topics, packed, len(rows), WaitRules(check=pipeline.check_workers, timeout_s=120))
    assert follow_until(pipeline, topics.results, "foreign", len(texts)) == len(texts)
    out = tmp_path / "foreign.jsonl"
    done = pipeline.cli("results", "foreign", "-o", str(out))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == [f"f{i}" for i in range(len(texts))]
    for line, text in zip(lines, texts, strict=True):
        np.testing.assert_allclose(line["embedding"], tiny.expected(np.array(reference_ids(text))), atol=1e-6)
