"""Inputs the tests write: lines of the shipped example, JSON Lines files, and results made by hand."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from schemas import InferenceResult

EXAMPLE = Path(__file__).parents[2] / "producers" / "examples" / "python-docs-paragraphs.jsonl"


def example_lines(n: int) -> list[dict[str, str]]:
    with EXAMPLE.open(encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(n), f, strict=False)]


def write_jsonl(path: Path, rows: Sequence[Mapping[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def many_lines(path: Path, n: int) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"r{i}", "text": f"line {i} of a run that is stopped before its end"}) + "\n")
    return path


def result(rid: str, batch: str, ts: list[int], length: int = 10, padded: int = 10) -> InferenceResult:
    keys = [
        "submitted",
        "preprocess_start",
        "preprocess_end",
        "batch_formed",
        "inference_start",
        "inference_end",
        "result_produced",
    ]
    return InferenceResult(
        "j", rid, 0, "m", "1", (), batch, 2, {}, dict(zip(keys, ts, strict=True)), (), length, padded
    )
