"""Jobs as objects: jobs list, status (with --watch) and submit --wait, against real workers."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.jobs.pipeline import Pipeline
from tests.jobs.test_pipeline import example_lines, write_jsonl
from tests.tiny_model import TinyModel


def test_a_job_is_listed_watched_and_waited_for(pipeline: Pipeline, tiny: TinyModel, tmp_path: Path) -> None:
    rows = example_lines(300)
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "2", "--max-linger-ms", "0")
    done = pipeline.cli("submit", str(write_jsonl(tmp_path / "in.jsonl", rows)), "--model", "tiny")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()

    watched = pipeline.cli("status", job_id, "--watch")
    assert watched.returncode == 0, watched.stderr
    lines = watched.stdout.splitlines()
    assert lines[-1].startswith(f"{job_id} completed: 300/300 done (preprocessed 300, inferred 300, dead-lettered 0)")
    assert any("rec/s  ETA" in line for line in lines)

    status = json.loads(pipeline.cli("status", job_id, "--json").stdout)
    assert status["state"] == "completed"
    assert status["counts"] == {
        "submitted": 300,
        "preprocessed": 300,
        "inferred": 300,
        "dead_lettered": 0,
        "cancelled": 0,
    }
    listed = [json.loads(line) for line in pipeline.cli("jobs", "list", "--json").stdout.splitlines()]
    assert [(j["job_id"], j["state"], j["counts"]["inferred"]) for j in listed] == [(job_id, "completed", 300)]
    assert pipeline.cli("status", "job-nope").returncode == 1


def test_submit_wait_exits_0_when_all_succeed_and_4_when_some_dead_letter(
    pipeline: Pipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    good = write_jsonl(tmp_path / "good.jsonl", example_lines(20))
    ok = pipeline.cli("submit", str(good), "--model", "tiny", "--wait")
    assert ok.returncode == 0, ok.stderr
    assert "0 dead-lettered" in ok.stderr
    missing_model = f"nope{uuid.uuid4().hex[:6]}"
    bad = pipeline.cli("submit", str(good), "--model", missing_model, "--wait")
    assert bad.returncode == 4, bad.stderr
    assert "20 dead-lettered" in bad.stderr
    job_id = bad.stdout.strip()
    status = json.loads(pipeline.cli("status", job_id, "--json").stdout)
    assert status["state"] == "completed_with_errors"
    assert status["counts"]["dead_lettered"] == 20
