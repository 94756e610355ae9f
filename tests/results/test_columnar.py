"""Results as Parquet and Arrow: the same records and values as JSON Lines, read back by pyarrow,
pandas and DuckDB, written in row groups, refused whole when they cannot fit; then `nearline results`
on the real broker for a text job and an image job."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import results.columnar
from jobs.launch.runner import WaitRules, watch_job
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import ConsumedRecord, job_record
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import ENV_NAMESPACE, Topics
from model_repository.config import ModelConfig
from results.columnar import ColumnarShapeError
from results.formats import OutputFormat, OutputFormatError, output_format
from results.spill import ResultSpill
from schemas import DeadLetter, InferenceResult, RawText, Tensor, encode
from schemas.attributes import REUSED_STAMP
from tests.support.columnar_check import assert_columnar_equals_jsonl, jsonl_lines
from tests.support.image_corpus import bad_and_odd_images, real_photos
from tests.support.inputs import example_lines, write_jsonl
from tests.support.item_output import write_items, write_spill
from tests.support.pipeline import RunningPipeline, submit
from tests.support.tiny_model import TinyModel


def embedding(i: int, attributes: dict[str, str] | None = None, dim: int = 6) -> InferenceResult:
    vector = np.random.default_rng(i).standard_normal(dim).astype(np.float32)
    return InferenceResult(
        "job", f"r{i}", i, "tiny", "1", (Tensor.from_array("embedding", vector),), "b", 1, attributes or {}
    )


def classified(i: int) -> InferenceResult:
    scores = np.array([0.5, 0.25, 0.125], np.float32) / (i + 1)
    outputs = (Tensor.from_array("top_index", np.array([i, 7, 3])), Tensor.from_array("top_score", scores))
    return InferenceResult("job", f"p{i}.jpg", i, "net", "2", outputs, "b", 1, labels=(f"cat {i}", "dog", "eel"))


def dead(i: int) -> DeadLetter:
    raw = encode(RawText("job", f"r{i}", i, "tiny", "x", 1))
    return DeadLetter.from_error(
        "preprocess", ValueError(f"bad {i}"), ("raw.text", 0, i, raw), job_id="job", record_id=f"r{i}", model="tiny"
    )


def write_both(items: list[InferenceResult | DeadLetter], tmp_path: Path, fmt: OutputFormat) -> tuple[Path, Path]:
    example = next((item for item in items if isinstance(item, InferenceResult)), None)
    jsonl, table = tmp_path / "out.jsonl", tmp_path / f"out.{'parquet' if fmt is OutputFormat.PARQUET else 'arrow'}"
    assert write_items(items, example, jsonl, io.StringIO()) == len(items)
    assert write_items(items, example, table, io.StringIO(), fmt) == len(items)
    return table, jsonl


@pytest.mark.parametrize("fmt", [OutputFormat.PARQUET, OutputFormat.ARROW])
def test_embeddings_dead_letters_and_attributes_read_back_equal_to_json_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: OutputFormat
) -> None:
    monkeypatch.setattr(results.columnar, "ROW_GROUP_ROWS", 4)  # several row groups, a short last one
    items: list[InferenceResult | DeadLetter] = [dead(0)]  # a job may start with a dead letter
    items += [embedding(i, {"source": f"doc {i}", "é": "ü"} if i % 3 else None) for i in range(1, 10)]
    items.insert(5, dead(99))
    table, jsonl = write_both(items, tmp_path, fmt)
    assert_columnar_equals_jsonl(table, jsonl, ["embedding"])
    if fmt is OutputFormat.PARQUET:
        import pyarrow.parquet as pq

        assert pq.ParquetFile(table).metadata.num_row_groups == 3


def test_classifier_labels_are_a_list_of_label_index_score_structs(tmp_path: Path) -> None:
    items: list[InferenceResult | DeadLetter] = [classified(i) for i in range(5)]
    items.insert(2, dead(2))
    table, jsonl = write_both(items, tmp_path, OutputFormat.PARQUET)
    assert_columnar_equals_jsonl(table, jsonl, ["labels"])


def test_parquet_dictionary_encodes_the_repeating_columns_and_leaves_floats_plain(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    embeddings, jsonl = write_both([embedding(i) for i in range(20)], tmp_path, OutputFormat.PARQUET)
    (tmp_path / "labels").mkdir()
    labels, _ = write_both([classified(i) for i in range(5)], tmp_path / "labels", OutputFormat.PARQUET)
    for table in (embeddings, labels):
        row_group = pq.ParquetFile(table).metadata.row_group(0)
        dictionary = {
            row_group.column(i).path_in_schema: row_group.column(i).has_dictionary_page
            for i in range(row_group.num_columns)
        }
        floats = {path for path in dictionary if path.startswith("embedding") or path.endswith(".score")}
        assert floats and not any(dictionary[path] for path in floats), dictionary
        assert dictionary["job_id"] and dictionary["model"] and dictionary["model_version"], dictionary
    assert pq.ParquetFile(labels).metadata.row_group(0).column(3).path_in_schema == "labels.list.element.label"
    assert pq.ParquetFile(labels).metadata.row_group(0).column(3).has_dictionary_page
    assert_columnar_equals_jsonl(embeddings, jsonl, ["embedding"])


def test_a_job_with_no_result_still_writes_a_readable_file(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    table, jsonl = write_both([dead(1), dead(2)], tmp_path, OutputFormat.PARQUET)
    assert_columnar_equals_jsonl(table, jsonl, [])
    empty = tmp_path / "empty.parquet"
    assert write_items([], None, empty, io.StringIO(), OutputFormat.PARQUET) == 0
    assert pq.read_table(empty).num_rows == 0


def test_a_result_of_another_shape_is_refused_by_name_and_leaves_no_file(tmp_path: Path) -> None:
    items = [embedding(1), embedding(2, dim=8)]
    out = tmp_path / "out.parquet"
    with pytest.raises(ColumnarShapeError, match=r"'r2'.*embedding\[8\].*embedding\[6\].*jsonl"):
        write_items(items, items[0], out, io.StringIO(), OutputFormat.PARQUET)
    assert list(tmp_path.iterdir()) == []


def test_the_format_comes_from_the_flag_else_the_suffix_else_json_lines() -> None:
    assert output_format(Path("r.parquet")) is OutputFormat.PARQUET
    assert output_format(Path("r.PQ")) is OutputFormat.PARQUET
    assert output_format(Path("r.feather")) is OutputFormat.ARROW
    assert output_format(Path("r.jsonl")) is OutputFormat.JSONL
    assert output_format(Path("r.txt")) is OutputFormat.JSONL
    assert output_format(None) is OutputFormat.JSONL
    assert output_format(Path("r.jsonl"), "parquet") is OutputFormat.PARQUET
    assert output_format(Path("r.csv"), "jsonl") is OutputFormat.JSONL  # asked for by name: written
    for name in ("r.csv", "r.TSV", "r.json", "r.jsonl.gz", "r.parquet.zst", "r.xlsx"):
        with pytest.raises(OutputFormatError, match="--output-format jsonl"):
            output_format(Path(name))


def test_nearline_results_refuses_a_job_of_mixed_output_shapes_as_parquet_and_writes_it_as_json_lines(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    ensure_topics(settings, [TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    mixed = [embedding(1), embedding(2, dim=8)]  # version 2 of a model with a wider embedding
    produce_all(make_producer(settings), [job_record(topics.results, encode(r), "job", r.record_id) for r in mixed])
    env = {**os.environ, ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
    command = [sys.executable, "-m", "jobs.cli", "results", "job", "-o"]
    refused = subprocess.run([*command, str(tmp_path / "out.parquet")], env=env, capture_output=True, text=True)
    assert refused.returncode == 1 and "'r2'" in refused.stderr and "--output-format jsonl" in refused.stderr
    assert "Traceback" not in refused.stderr and list(tmp_path.iterdir()) == []
    written = subprocess.run([*command, str(tmp_path / "out.jsonl")], env=env, capture_output=True, text=True)
    assert written.returncode == 0, written.stderr
    assert [len(line["embedding"]) for line in jsonl_lines(tmp_path / "out.jsonl")] == [6, 8]


def test_nearline_results_writes_parquet_and_arrow_equal_to_json_lines_for_a_text_and_an_image_job(
    pipeline: RunningPipeline, tiny: TinyModel, efficientnet: ModelConfig, tmp_path: Path
) -> None:
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu-text", "gpu", "--model", "tiny")
    pipeline.start("gpu-image", "gpu", "--model", "efficientnet-lite0")
    rows = [{**row, "attributes": {"row": str(i)}} if i % 2 else row for i, row in enumerate(example_lines(60))]
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in real_photos()[:5]:
        shutil.copy2(p, photos / p.name)
    (photos / "truncated.jpg").write_bytes(bad_and_odd_images()["truncated.jpg"])  # a dead letter among them
    text = submit(pipeline, write_jsonl(tmp_path / "texts.jsonl", rows))
    image = submit(pipeline, photos, model="efficientnet-lite0")
    for job_id, total in ((text, len(rows)), (image, 6)):
        watch_job(
            pipeline.settings, pipeline.topics, job_id, total, WaitRules(check=pipeline.check_workers, timeout_s=180)
        )

    for job_id, outputs in ((text, ["embedding"]), (image, ["labels"])):
        paths = {fmt: tmp_path / f"{job_id}.{fmt}" for fmt in ("jsonl", "parquet", "arrow")}
        for path in paths.values():
            done = pipeline.cli("results", job_id, "-o", str(path))
            assert done.returncode == 0, done.stderr
        assert_columnar_equals_jsonl(paths["parquet"], paths["jsonl"], outputs)
        assert_columnar_equals_jsonl(paths["arrow"], paths["jsonl"], outputs)
    lines = jsonl_lines(tmp_path / f"{text}.jsonl")
    assert [line["id"] for line in lines] == [row["id"] for row in rows]
    assert [line.get("attributes") for line in lines] == [row.get("attributes") for row in rows]
    assert [line["id"] for line in jsonl_lines(tmp_path / f"{image}.jsonl") if "error" in line] == ["truncated.jpg"]

    refused = pipeline.cli("results", text, "--output-format", "parquet")  # binary output needs a file
    assert refused.returncode == 2 and "-o FILE" in refused.stderr and not refused.stdout


@pytest.mark.parametrize("fmt", [OutputFormat.PARQUET, OutputFormat.ARROW])
def test_a_reused_result_says_so_in_its_column_as_its_json_line_does(tmp_path: Path, fmt: OutputFormat) -> None:
    """Results read from their bytes (results/rows.py, the path `nearline results` takes): the
    ones written from the results cache carry the `reused` stamp and are true in `reused`; computed
    ones and dead letters are false."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    topics = Topics(namespace="columnar-reused")
    reused_ids = {"r1", "r4", "r5"}
    items: list[InferenceResult | DeadLetter] = [
        replace(embedding(i), timestamps={REUSED_STAMP: 7} if f"r{i}" in reused_ids else {}) for i in range(8)
    ]
    items.insert(3, dead(99))
    records = [
        ConsumedRecord(topics.results, 0, n, encode(item), f"job/{item.record_id}".encode(), (("job_id", b"job"),))
        for n, item in enumerate(items)
        if isinstance(item, InferenceResult)
    ]
    dead_letter = job_record(topics.dead_letters, encode(items[3]), "job", "r99")
    records.append(
        ConsumedRecord(topics.dead_letters, 0, 0, dead_letter.value or b"", dead_letter.key, tuple(dead_letter.headers))
    )
    jsonl, table = tmp_path / "out.jsonl", tmp_path / f"out.{fmt.value}"
    with ResultSpill("job") as spill:
        spill.add(records, topics)
        assert write_spill(spill, jsonl) == 9
        assert write_spill(spill, table, fmt) == 9
    parquet = fmt is OutputFormat.PARQUET
    read = pq.read_table(table) if parquet else pa.ipc.open_file(pa.memory_map(str(table))).read_all()
    assert read.schema.field("reused").type == pa.bool_()
    assert dict(zip(read.column("id").to_pylist(), read.column("reused").to_pylist(), strict=True)) == {
        **{f"r{i}": f"r{i}" in reused_ids for i in range(8)},
        "r99": False,
    }
    assert {line["id"] for line in jsonl_lines(jsonl) if line.get("reused")} == reused_ids
    assert_columnar_equals_jsonl(table, jsonl, ["embedding"])
