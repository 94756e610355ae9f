"""Reads a Parquet (or Arrow) results file back with pyarrow, pandas and DuckDB and checks each
agrees, record by record, with the JSON Lines output of the same job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def jsonl_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def assert_row_matches_line(row: dict[str, Any], line: dict[str, Any], outputs: list[str]) -> None:
    for key in ("id", "job_id", "model"):
        assert row[key] == line[key], (key, row[key], line[key])
    assert row["model_version"] == line.get("model_version"), line["id"]
    # JSON Lines says it only when true; pandas gives numpy's bool
    assert row["reused"] is not None and bool(row["reused"]) is line.get("reused", False), line["id"]
    attributes = json.loads(row["attributes"]) if row["attributes"] is not None else None
    assert attributes == line.get("attributes"), line["id"]
    if "error" in line:
        assert row["error"] == line["error"], line["id"]
        assert all(row[name] is None for name in outputs), line["id"]
        return
    assert row["error"] is None, line["id"]
    for name in outputs:
        if name == "labels":
            assert [(g["label"], g["index"]) for g in row[name]] == [(g["label"], g["index"]) for g in line[name]]
            np.testing.assert_allclose([g["score"] for g in row[name]], [g["score"] for g in line[name]], atol=1e-6)
        else:
            # JSON Lines rounds to 8 decimals; the column keeps the float32 itself
            np.testing.assert_allclose(np.asarray(row[name], np.float64), line[name], rtol=0, atol=1e-7)


def assert_columnar_equals_jsonl(table_path: Path, jsonl_path: Path, outputs: list[str]) -> None:
    """pyarrow, pandas and (for Parquet) DuckDB each read table_path back equal to jsonl_path."""
    import duckdb
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = jsonl_lines(jsonl_path)
    parquet = table_path.suffix == ".parquet"
    table = pq.read_table(table_path) if parquet else pa.ipc.open_file(pa.memory_map(str(table_path))).read_all()
    assert table.column_names == ["id", "job_id", "model", *outputs, "model_version", "reused", "error", "attributes"]
    if "embedding" in outputs:
        embedding = table.schema.field("embedding").type
        assert pa.types.is_fixed_size_list(embedding) and embedding.value_type == pa.float32()
    rows = table.to_pylist()
    assert len(rows) == len(lines)
    for row, line in zip(rows, lines, strict=True):
        assert_row_matches_line(row, line, outputs)

    frame = pd.read_parquet(table_path) if parquet else pd.read_feather(table_path)
    assert frame["id"].tolist() == [line["id"] for line in lines]
    for record, line in zip(frame.to_dict("records"), lines, strict=True):
        assert_row_matches_line({k: None if _is_missing(v) else v for k, v in record.items()}, line, outputs)

    if parquet:
        id_column = duckdb.sql(f"SELECT id FROM read_parquet('{table_path}')")
        assert id_column is not None  # duckdb.sql returns None only for a statement without rows
        ids = [r[0] for r in id_column.fetchall()]
        assert ids == [line["id"] for line in lines]
        columns = ", ".join(["id", "job_id", "model", *outputs, "model_version", "reused", "error", "attributes"])
        relation = duckdb.sql(f"SELECT {columns} FROM read_parquet('{table_path}')")
        assert relation is not None
        names = relation.columns
        for values, line in zip(relation.fetchall(), lines, strict=True):
            assert_row_matches_line(dict(zip(names, values, strict=True)), line, outputs)


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))
