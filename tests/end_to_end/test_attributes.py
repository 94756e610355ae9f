"""Input attributes come back as the JSON values they were, in JSON Lines and in Parquet, and a
value JSON cannot carry is refused by name at submit (#30)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.launch.runner import WaitRules, watch_job
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import TinyModel

TYPED = {"n": 5, "f": 0.1, "big": 10**30, "b": True, "nul": None, "l": ["a", "b"], "o": {"k": "v"}, "s": "5"}


@pytest.mark.timeout(240)
def test_attributes_come_back_as_the_json_values_they_were(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    rows = [
        {"id": "typed", "text": "one", "attributes": TYPED},
        {"id": "plain", "text": "two", "attributes": {"k": "v", "é": "ü"}},
        {"id": "none", "text": "three"},
    ]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    done = pipeline.cli("submit", str(source), "--model", "tiny", "--job-id", "job-attrs")
    assert done.returncode == 0, done.stderr
    watch_job(
        pipeline.settings, pipeline.topics, "job-attrs", 3, WaitRules(check=pipeline.check_workers, timeout_s=120)
    )

    jsonl, parquet = tmp_path / "out.jsonl", tmp_path / "out.parquet"
    for path in (jsonl, parquet):
        written = pipeline.cli("results", "job-attrs", "-o", str(path))
        assert written.returncode == 0, written.stderr
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [line.get("attributes") for line in lines] == [TYPED, {"k": "v", "é": "ü"}, None]
    table = pq.read_table(parquet).to_pylist()
    assert [json.loads(r["attributes"]) if r["attributes"] else None for r in table] == [
        TYPED,
        {"k": "v", "é": "ü"},
        None,
    ]


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ('{"x": NaN}', 'attribute "x" is NaN, which JSON cannot carry: write it as a string or null'),
        ('{"x": Infinity}', 'attribute "x" is Infinity (or a number too large for a double, such as 1e400)'),
        ('{"x": 1e400}', 'attribute "x" is Infinity (or a number too large for a double, such as 1e400)'),
        ('{"x": -1e400}', 'attribute "x" is -Infinity (or a number too large for a double, such as -1e400)'),
        ('{"x": {"deep": [1, NaN]}}', 'attribute "x" holds NaN, which JSON cannot carry'),
    ],
)
def test_an_attribute_json_cannot_carry_is_refused_by_name_and_nothing_is_sent(
    pipeline: RunningPipeline, tmp_path: Path, attributes: str, reason: str
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(f'{{"text": "fine"}}\n{{"text": "odd", "attributes": {attributes}}}\n')
    done = pipeline.cli("submit", str(source), "--model", "tiny")
    assert done.returncode == 2, done.stderr
    assert f"error: {source}:2: {reason}" in done.stderr
    assert "nothing was submitted: 1 invalid record(s)" in done.stderr
