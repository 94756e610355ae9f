"""Table inputs end to end (#33): a Parquet file runs like the JSON Lines of the same texts, its
kept columns come back typed; a glob of two files runs as one job; a bad table submits nothing;
an image table (paths, bytes) is labelled like the folder of the same images."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from model_repository.config import ModelConfig
from tests.support.columnar_check import jsonl_lines
from tests.support.image_corpus import real_photos
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import TinyModel


def run(pipeline: RunningPipeline, *args: str) -> None:
    done = pipeline.cli("run", *args)
    assert done.returncode == 0, done.stderr


@pytest.mark.timeout(300)
def test_a_parquet_run_gives_the_json_lines_runs_embeddings_in_order_with_kept_columns_typed(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    rows = example_lines(12)
    table = pa.table(
        {
            "body": [r["text"] for r in rows],
            "stars": pa.array(range(12), pa.int64()),
            "seen": pa.array([dt.datetime(2024, 1, 1 + i) for i in range(12)], pa.timestamp("ms")),
            "score": pa.array([i / 4 for i in range(12)], pa.float32()),
        }
    )
    pq.write_table(table.slice(0, 7), tmp_path / "part-0.parquet")
    pq.write_table(table.slice(7), tmp_path / "part-1.parquet")
    write_jsonl(tmp_path / "same.jsonl", [{"id": str(i + 1), "text": r["text"]} for i, r in enumerate(rows)])
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    keep = ("--text-column", "body", "--keep-columns", "stars,seen,score")
    glob = str(tmp_path / "part-*.parquet")
    run(pipeline, glob, "--model", "tiny", *keep, "-o", str(tmp_path / "out.parquet"))
    run(pipeline, glob, "--model", "tiny", *keep, "-o", str(tmp_path / "out.jsonl"))
    run(pipeline, str(tmp_path / "same.jsonl"), "--model", "tiny", "-o", str(tmp_path / "same-out.jsonl"))

    got = pq.read_table(tmp_path / "out.parquet")
    want = jsonl_lines(tmp_path / "same-out.jsonl")
    assert got.column("id").to_pylist() == [str(i) for i in range(1, 13)] == [line["id"] for line in want]
    np.testing.assert_allclose(
        np.array(got.column("embedding").to_pylist()), [line["embedding"] for line in want], atol=1e-6
    )
    for name in ("stars", "seen", "score"):
        assert got.schema.field(name).type == table.schema.field(name).type, name
        assert got.column(name).to_pylist() == table.column(name).to_pylist(), name
    lines = jsonl_lines(tmp_path / "out.jsonl")
    assert [(line["stars"], line["seen"], line["score"]) for line in lines[:2]] == [
        (0, "2024-01-01T00:00:00", 0.0),
        (1, "2024-01-02T00:00:00", 0.25),
    ]


def test_a_bad_table_submits_nothing_and_exits_2_naming_file_and_row(pipeline: RunningPipeline, tmp_path: Path) -> None:
    pq.write_table(pa.table({"text": ["fine", None, "fine too"]}), tmp_path / "in.parquet")
    done = pipeline.cli("submit", str(tmp_path / "in.parquet"), "--model", "tiny")
    assert done.returncode == 2, done.stderr
    assert f'error: {tmp_path}/in.parquet:row 2: "text" is null' in done.stderr
    assert "nothing was submitted: 1 invalid record(s)" in done.stderr
    missing = pipeline.cli("submit", str(tmp_path / "in.parquet"), "--model", "tiny", "--text-column", "body")
    assert missing.returncode == 2, missing.stderr
    assert f'error: {tmp_path}/in.parquet: no column "body" (--text-column); its columns are: text' in missing.stderr
    skipped = pipeline.cli("submit", str(tmp_path / "in.parquet"), "--model", "tiny", "--skip-invalid")
    assert skipped.returncode == 0, skipped.stderr
    assert "submitted 2 records" in skipped.stderr


@pytest.mark.timeout(600)
def test_an_image_table_of_paths_or_bytes_is_labelled_like_the_folder(
    pipeline: RunningPipeline, efficientnet: ModelConfig, tmp_path: Path
) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in real_photos()[:3]:
        shutil.copy2(p, photos / p.name)
    names = sorted(p.name for p in photos.iterdir())
    pq.write_table(pa.table({"image": [f"photos/{n}" for n in names], "name": names}), tmp_path / "paths.parquet")
    data = pa.array([(photos / n).read_bytes() for n in names], pa.binary())
    pq.write_table(pa.table({"image": data, "name": names}), tmp_path / "bytes.parquet")
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "efficientnet-lite0")
    outputs = {}
    for source in ("photos", "paths.parquet", "bytes.parquet"):
        out = tmp_path / f"{source}.jsonl"
        keep = () if source == "photos" else ("--keep-columns", "name")
        run(pipeline, str(tmp_path / source), "--model", "efficientnet-lite0", *keep, "-o", str(out))
        outputs[source] = jsonl_lines(out)
    folder = [[g["index"] for g in line["labels"]] for line in outputs["photos"]]
    for source in ("paths.parquet", "bytes.parquet"):
        assert [line["name"] for line in outputs[source]] == names
        assert [[g["index"] for g in line["labels"]] for line in outputs[source]] == folder, source
    assert json.dumps(outputs["photos"][0]["id"]) == json.dumps(names[0])
