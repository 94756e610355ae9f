"""`nearline run` on its embedded broker reuses across runs (docs/reuse.md): the first run's
results cache is kept on disk when it ends, and the next run of the same texts writes them from
it, marked reused, with the same embeddings; a new text is computed, and --no-reuse computes all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobs.launch.kept_cache import ENV_RESULTS_CACHE
from model_repository.folders import ENV_MODEL_REPOSITORY
from tests.support.tiny_model import TinyModel

ROOT = Path(__file__).resolve().parents[2]


def run(source: Path, repository: Path, *args: str) -> tuple[dict[str, dict[str, Any]], str]:
    """The output lines by id, and what the run said on stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARLINE_") or k == ENV_RESULTS_CACHE}
    env[ENV_MODEL_REPOSITORY] = str(repository)
    out = source.with_suffix(f".out{len(list(source.parent.glob('*.out*')))}.jsonl")
    command = [sys.executable, "-m", "jobs.cli", "run", str(source), "--model", "tiny", "-o", str(out), *args]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return {line["id"]: line for line in lines}, done.stderr


@pytest.mark.process
@pytest.mark.timeout(600)
def test_a_second_run_of_the_same_texts_reuses_the_first_runs_results(
    tiny: TinyModel, model_repository: Path, kept_results_cache: Path, tmp_path: Path
) -> None:
    texts = {"a": "the same text", "b": "another text", "c": "the same text"}
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in texts.items()))
    first, said = run(source, model_repository)
    assert set(first) == set(texts) and not any(line.get("reused") for line in first.values())
    assert "kept from earlier runs" not in said
    assert (kept_results_cache / "tiny.cache").is_file()

    texts["d"] = "a text the first run did not have"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in texts.items()))
    second, said = run(source, model_repository)
    assert "2 results kept from earlier runs" in said  # two texts: "a" and "c" are the same one
    # the summary counts them apart, and the batches are the new text's only
    assert "4 records in" in said and "3 reused from earlier results, the other 1: 1 batch," in said
    assert {i for i, line in second.items() if line.get("reused")} == {"a", "b", "c"}
    for i in ("a", "b", "c"):
        assert second[i]["embedding"] == first[i]["embedding"]  # the first run's bytes

    third, said = run(source, model_repository, "--no-reuse")
    assert "reused" not in said
    assert not any(line.get("reused") for line in third.values())
    for i in texts:  # computed again, in another batch (another padded length): equal to float precision
        np.testing.assert_allclose(third[i]["embedding"], second[i]["embedding"], atol=1e-6)
