"""Result reuse's internal attributes (schemas/attributes.py: the reuse key, no-reuse) travel with a
job's records and never show in its outputs: JSON Lines and Parquet, written from decoded results
(write_items) and from their bytes (`nearline results`' write_rows)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from jobs.bulk_output import OutputRow, write_rows
from jobs.output import OutputFormat
from schemas import InferenceResult, Tensor, encode
from schemas.attributes import REUSE_KEY_ATTRIBUTE
from tests.support.item_output import write_items

INTERNAL = {REUSE_KEY_ATTRIBUTE: json.dumps("ab" * 32)}


def result(i: int, attributes: dict[str, str]) -> InferenceResult:
    vector = np.random.default_rng(i).standard_normal(4).astype(np.float32)
    return InferenceResult(
        "job", f"r{i}", i, "tiny", "1", (Tensor.from_array("embedding", vector),), "b", 1, attributes
    )


RESULTS = [
    result(0, {**INTERNAL, "source": json.dumps("doc 0"), "n": "5"}),
    result(1, dict(INTERNAL)),  # only internal ones: no attributes shown at all
    result(2, {REUSE_KEY_ATTRIBUTE: json.dumps("cd" * 32), "n": "7"}),
    result(3, {}),
]
SHOWN = [{"source": "doc 0", "n": 5}, None, {"n": 7}, None]


def parquet_attributes(path: Path) -> list[dict[str, object] | None]:
    import pyarrow.parquet as pq

    column = pq.read_table(path).column("attributes").to_pylist()
    return [json.loads(text) if text is not None else None for text in column]


@pytest.mark.parametrize("source", ["decoded", "bytes"])
def test_json_lines_show_a_result_s_own_attributes_only(source: str) -> None:
    out = io.StringIO()
    if source == "decoded":
        assert write_items(RESULTS, RESULTS[0], None, out) == len(RESULTS)
    else:
        rows = [OutputRow(encode(r), False, None) for r in RESULTS]
        assert write_rows(rows, RESULTS[0], None, out) == len(RESULTS)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line.get("attributes") for line in lines] == SHOWN
    assert REUSE_KEY_ATTRIBUTE not in out.getvalue()


@pytest.mark.parametrize("source", ["decoded", "bytes"])
def test_parquet_shows_a_result_s_own_attributes_only(tmp_path: Path, source: str) -> None:
    path = tmp_path / "out.parquet"
    if source == "decoded":
        assert write_items(RESULTS, RESULTS[0], path, io.StringIO(), OutputFormat.PARQUET) == len(RESULTS)
    else:
        rows = [OutputRow(encode(r), False, None) for r in RESULTS]
        assert write_rows(rows, RESULTS[0], path, io.StringIO(), OutputFormat.PARQUET) == len(RESULTS)
    assert parquet_attributes(path) == SHOWN
