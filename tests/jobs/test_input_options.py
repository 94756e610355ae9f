"""`nearline submit` on the real broker with table inputs that crashed it and options it ignored
(#40): each is kept or refused by name with exit code 2, and a refusal sends nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.registry import load_jobs
from kafka_io.reading import read_topics
from kafka_io.topics import TopicSpec, ensure_topics
from schemas import RawText
from tests.support.pipeline import RunningPipeline
from tests.support.records import raw_texts_in

# The CLI in a process where pandas cannot be imported, as on a machine without it: pyarrow then
# raised ("Install pandas") on a nanosecond timestamp with sub-microsecond digits.
WITHOUT_PANDAS = """
import sys
class NoPandas:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("No module named 'pandas'", name=name)
sys.meta_path.insert(0, NoPandas())
from jobs.cli import main
sys.argv[0] = "nearline"
main()
"""

TABLES = "table inputs (Parquet, Arrow, CSV, TSV)"


def raw_texts(pipeline: RunningPipeline, job_id: str) -> list[RawText]:
    ensure_topics(pipeline.settings, [TopicSpec(pipeline.topics.raw_text)])
    records = raw_texts_in(read_topics(pipeline.settings, [pipeline.topics.raw_text]))
    return [r for r in records if r.job_id == job_id]


@pytest.mark.timeout(120)
def test_a_nanosecond_timestamp_is_kept_exactly_without_pandas(pipeline: RunningPipeline, tmp_path: Path) -> None:
    at = pa.array([1_700_000_000_123_456_789, None], pa.timestamp("ns"))
    pq.write_table(pa.table({"text": ["one", "two"], "at": at}), tmp_path / "in.parquet")
    args = ["submit", str(tmp_path / "in.parquet"), "--keep-columns", "at", "--model", "tiny", "--job-id", "job-ns"]
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PANDAS, *args], env=pipeline.env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert [r.attributes for r in raw_texts(pipeline, "job-ns")] == [
        {"at": '"2023-11-14T22:13:20.123456789"'},
        {"at": "null"},
    ]


def refusal(pipeline: RunningPipeline, job_id: str, *args: str, stdin: bytes | None = None) -> str:
    """stderr of a submit that must exit 2 and send nothing."""
    done = pipeline.cli("submit", *args, "--model", "tiny", "--job-id", job_id, stdin=stdin)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert job_id not in load_jobs(pipeline.settings, pipeline.topics)
    assert raw_texts(pipeline, job_id) == []
    return done.stderr


@pytest.mark.timeout(180)
def test_a_csv_header_naming_a_used_column_twice_exits_2_naming_file_and_column(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    twice = tmp_path / "twice.csv"
    twice.write_text("text,text,id\nhello,world,1\n", encoding="utf-8")
    assert f'error: {twice}: columns 1 and 2 are all named "text" (--text-column)' in refusal(
        pipeline, "job-twice", str(twice)
    )
    kept = tmp_path / "kept.csv"
    kept.write_text("a,a,text\n1,2,hi\n", encoding="utf-8")
    assert f'error: {kept}: columns 1 and 2 are all named "a" (--keep-columns)' in refusal(
        pipeline, "job-kept", str(kept), "--keep-columns", "a", "--skip-invalid"
    )


@pytest.mark.timeout(180)
def test_options_that_do_not_apply_to_the_input_are_refused_by_name(pipeline: RunningPipeline, tmp_path: Path) -> None:
    csv_bytes = b"id,text\n1,one\n2,two\n"
    for fmt in ("csv", "parquet"):
        stderr = refusal(pipeline, f"job-stdin-{fmt}", "-", "--format", fmt, stdin=csv_bytes)
        assert f"error: --format {fmt}: stdin is read as texts, one per line, or JSON Lines (--format jsonl)" in stderr

    lines = tmp_path / "in.jsonl"
    lines.write_text('{"text": "one", "body": "x"}\n', encoding="utf-8")
    stderr = refusal(pipeline, "job-jl-col", str(lines), "--text-column", "body")
    assert (
        f"error: --text-column applies only to table inputs (Parquet, Arrow, CSV, TSV): {lines} is read as JSON Lines"
        in stderr
    )
    stderr = refusal(pipeline, "job-jl-keep", str(lines), "--keep-columns", "body")
    assert (
        f"error: --keep-columns applies only to table inputs (Parquet, Arrow, CSV, TSV): {lines} is read as" in stderr
    )

    pq.write_table(pa.table({"text": ["one"], "body": ["x"]}), tmp_path / "in.parquet")
    stderr = refusal(pipeline, "job-pq-field", str(tmp_path / "in.parquet"), "--text-field", "body")
    assert (
        f"error: --text-field applies only to JSON Lines input: {tmp_path / 'in.parquet'} is read as a table" in stderr
    )

    texts = tmp_path / "in.txt"
    texts.write_text("one\n", encoding="utf-8")
    stderr = refusal(pipeline, "job-txt", str(texts), "--id-column", "id")
    assert (
        f"error: --id-column applies only to table inputs (Parquet, Arrow, CSV, TSV): {texts} is read as texts"
        in stderr
    )

    # what does apply still runs: --text-field on JSON Lines, --text-column on a table
    assert pipeline.cli("submit", str(lines), "--text-field", "body", "--model", "tiny").returncode == 0
    table = str(tmp_path / "in.parquet")
    assert pipeline.cli("submit", table, "--text-column", "body", "--model", "tiny").returncode == 0


@pytest.mark.timeout(120)
def test_keeping_a_column_and_its_input_dot_name_exits_2_naming_both(pipeline: RunningPipeline, tmp_path: Path) -> None:
    table = pa.table({"text": ["a"], "embedding": [1], "input.embedding": [2]})
    pq.write_table(table, tmp_path / "in.parquet")
    stderr = refusal(pipeline, "job-clash", str(tmp_path / "in.parquet"), "--keep-columns", "embedding,input.embedding")
    assert (
        'error: --keep-columns: "embedding" and "input.embedding" would both come back as "input.embedding"' in stderr
    )
