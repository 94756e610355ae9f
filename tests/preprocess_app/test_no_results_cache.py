"""`nearline worker preprocess --no-results-cache` (docs/reuse.md), on the real broker and workers:
the same file submitted twice is computed twice, and cache.<model> gets no result, only the
starting GPU worker's runtime record."""

from __future__ import annotations

import json
from pathlib import Path

from kafka_io.reading import read_topics
from kafka_io.records import RUNTIME_RECORD_KEY
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import TinyModel


def test_a_worker_without_the_results_cache_computes_a_file_again_and_caches_nothing(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    pipeline.start("preprocess", "preprocess", "--no-results-cache")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    source = str(write_jsonl(tmp_path / "in.jsonl", example_lines(50)))
    counts = []
    for _ in range(2):
        done = pipeline.cli("submit", source, "--model", "tiny", "--wait")
        assert done.returncode == 0, done.stderr
        status = json.loads(pipeline.cli("status", done.stdout.strip(), "--json").stdout)
        counts.append((status["counts"]["inferred"], status["counts"]["reused"]))
    assert counts == [(50, 0), (50, 0)]
    cached = [(m.key, m.value) for m in read_topics(pipeline.settings, [pipeline.topics.cache("tiny")], 5.0)]
    assert [key for key, _ in cached] == [RUNTIME_RECORD_KEY]
