"""nearline reprocess: a finished job re-run from its tensor records under a new model version."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from jobs.launch.runner import WaitRules, watch_job
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline, submit
from tests.support.tiny_model import build_tiny_model


@pytest.mark.parametrize("priority", ["bulk", "live"])
def test_reprocess_runs_a_job_again_under_a_new_version_without_preprocessing(
    pipeline: RunningPipeline,
    model_repository: Path,
    reference_ids: Callable[[str], list[int]],
    tmp_path: Path,
    priority: str,
) -> None:
    """A live job's tensors are in the live lane's topic: reprocess once said it had none."""
    model = f"re{uuid.uuid4().hex[:6]}"
    v1 = build_tiny_model(model_repository, name=model, version="1")
    rows = example_lines(40)
    pipeline.start("preprocess", "preprocess")
    gpu = pipeline.start("gpu", "gpu", "--model", model)
    job_id = submit(pipeline, write_jsonl(tmp_path / "in.jsonl", rows), "--priority", priority, model=model)
    watch_job(
        pipeline.settings, pipeline.topics, job_id, len(rows), WaitRules(check=pipeline.check_workers, timeout_s=120)
    )
    gpu.stop()

    v2 = build_tiny_model(model_repository, name=model, version="2")
    done = pipeline.cli("reprocess", job_id, "--model", f"{model}@2")
    assert done.returncode == 0, done.stderr
    assert f"reprocessed {len(rows)} tensor records" in done.stderr

    for version, tiny in (("", v2), ("1", v1), ("2", v2)):
        out = tmp_path / f"v{version}.jsonl"
        args = ["results", job_id, "-o", str(out)] + (["--model-version", version] if version else [])
        assert pipeline.cli(*args).returncode == 0
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        assert [line["id"] for line in lines] == [r["id"] for r in rows]
        assert {line["model_version"] for line in lines} == {tiny.config.version}
        for line, row in zip(lines, rows, strict=True):
            np.testing.assert_allclose(
                line["embedding"], tiny.expected(np.array(reference_ids(row["text"]))), atol=1e-6
            )
    assert pipeline.cli("reprocess", "job-nope", "--model", f"{model}@2").returncode == 1
    assert pipeline.cli("reprocess", job_id, "--model", f"{model}@7").returncode == 3
