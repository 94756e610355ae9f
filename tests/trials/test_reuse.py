"""Results reused across jobs, on the real broker and workers with the shipped MiniLM: job A embeds
20,000 texts; job B is the same file with 2% of its rows edited, 2% added and 2% removed. B reuses
exactly its unchanged rows (`status`), and B's results equal those of a fresh run of B's file
(`--no-reuse`, computing every row) for every row, the edited ones included. The tiny model's tests:
a new version of a model reuses nothing, and a scheduled job's second tick over an unchanged glob
reuses every record."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobs.scheduling.cron import to_us
from jobs.scheduling.scheduler import Scheduler, SchedulerSettings
from jobs.scheduling.schedules import ScheduleSpec, add_schedule, new_schedule
from kafka_io.reading import read_topics
from kafka_io.records import NO_REUSE_HEADER, header_of
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from model_repository.config import ModelConfig
from schemas import JobTerms
from tests.support.pipeline import RunningPipeline, finish_and_check, submit
from tests.support.scheduling import T0, Clock
from tests.support.tiny_model import TinyModel, build_tiny_model

ROWS = 20_000
RNG = random.Random(52)
WORDS = [
    "kafka",
    "records",
    "results",
    "reuse",
    "model",
    "tokens",
    "embed",
    "batch",
    "topic",
    "worker",
    "partition",
    "offset",
]


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24))) for i in range(n)]


def status_of(pipeline: RunningPipeline, job_id: str) -> dict[str, Any]:
    done = pipeline.cli("status", job_id, "--json")
    assert done.returncode == 0, done.stderr
    status: dict[str, Any] = json.loads(done.stdout)
    return status


def results_of(pipeline: RunningPipeline, job_id: str, out: Path) -> dict[str, dict[str, Any]]:
    done = pipeline.cli("results", job_id, "-o", str(out))
    assert done.returncode == 0, done.stderr
    return {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}


@pytest.mark.long
@pytest.mark.real_model
@pytest.mark.timeout(1500)
def test_a_job_over_a_changed_file_reuses_exactly_its_unchanged_rows_and_equals_a_fresh_run(
    minilm: ModelConfig, model_repository: Path, settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    a_rows = [{"id": f"r{i}", "text": t} for i, t in enumerate(texts(ROWS, 1))]
    picked = RNG.sample(range(ROWS), 2 * ROWS // 50)
    removed, edited = set(picked[: ROWS // 50]), set(picked[ROWS // 50 :])
    b_rows = [
        {"id": r["id"], "text": r["text"] + " (edited)" if i in edited else r["text"]}
        for i, r in enumerate(a_rows)
        if i not in removed
    ]
    b_rows += [{"id": f"new{i}", "text": t} for i, t in enumerate(texts(ROWS // 50, 2))]
    a_file, b_file = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a_file.write_text("".join(json.dumps(r) + "\n" for r in a_rows))
    b_file.write_text("".join(json.dumps(r) + "\n" for r in b_rows))
    pipeline = RunningPipeline(settings, topics, model_repository, tmp_path / "logs")
    try:
        pipeline.start("preprocess", "preprocess")
        pipeline.start("gpu", "gpu", "--model", "minilm")
        job_a = submit(pipeline, a_file, model="minilm")
        finish_and_check(pipeline, job_a, [r["id"] for r in a_rows], tmp_path, timeout_s=900, reused=0)
        job_b = submit(pipeline, b_file, model="minilm")
        unchanged = ROWS - len(removed) - len(edited)
        finish_and_check(pipeline, job_b, [r["id"] for r in b_rows], tmp_path, timeout_s=600, reused=unchanged)
        fresh = submit(pipeline, b_file, "--no-reuse", model="minilm")
        finish_and_check(pipeline, fresh, [r["id"] for r in b_rows], tmp_path, timeout_s=900, reused=0)
        b_status, fresh_status = status_of(pipeline, job_b), status_of(pipeline, fresh)
        b_results = results_of(pipeline, job_b, tmp_path / "b-results.jsonl")
        fresh_results = results_of(pipeline, fresh, tmp_path / "fresh-results.jsonl")
    finally:
        pipeline.stop()
    assert b_status["counts"]["reused"] == unchanged
    assert b_status["counts"]["inferred"] == len(b_rows) - unchanged  # the edited and the added rows
    assert fresh_status["counts"]["reused"] == 0
    reused = {k for k, row in b_results.items() if row.get("reused")}
    assert reused == {r["id"] for i, r in enumerate(a_rows) if i not in removed and i not in edited}
    assert sorted(b_results) == sorted(fresh_results)
    got = np.array([b_results[k]["embedding"] for k in sorted(b_results)], dtype=np.float32)
    want = np.array([fresh_results[k]["embedding"] for k in sorted(b_results)], dtype=np.float32)
    # a fresh run's floats move with the batch a text runs in (padding, kernel order); a reused
    # result is the one an earlier run of the same version wrote for the same text
    np.testing.assert_allclose(got, want, atol=2e-6)


@pytest.mark.timeout(600)
def test_a_new_version_reuses_nothing_and_a_restarted_pipeline_reuses_what_the_topic_kept(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    repository = tmp_path / "models"  # a repository of its own: a second version changes the default
    build_tiny_model(repository)
    rows = [{"id": f"r{i}", "text": t} for i, t in enumerate(texts(200, 3))]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ids = [r["id"] for r in rows]
    for version, jobs in (("1", (0, len(rows))), ("2", (0, len(rows)))):
        if version == "2":
            build_tiny_model(repository, version="2")  # another version: the workers serve it from their start
        pipeline = RunningPipeline(settings, topics, repository, tmp_path / f"logs-{version}")
        try:
            pipeline.start("preprocess", "preprocess")
            pipeline.start("gpu", "gpu", "--model", "tiny")
            for reused in jobs:  # the first job of a version computes, the second reuses it all
                job_id = submit(pipeline, source)
                finish_and_check(pipeline, job_id, ids, tmp_path, timeout_s=300, reused=reused)
        finally:
            pipeline.stop()
    # version 1 again, in new workers: the cache is read back from its topic, and all of it reused
    shutil.rmtree(repository / "tiny" / "2")
    pipeline = RunningPipeline(settings, topics, repository, tmp_path / "logs-again")
    try:
        pipeline.start("preprocess", "preprocess")
        pipeline.start("gpu", "gpu", "--model", "tiny")
        job_id = submit(pipeline, source)
        finish_and_check(pipeline, job_id, ids, tmp_path, timeout_s=300, reused=len(rows))
    finally:
        pipeline.stop()


def generation_requests() -> list[dict[str, Any]]:
    """16 greedy requests (prompts and chats), 4 sampled with a seed, 4 sampled without one."""
    rows: list[dict[str, Any]] = []
    for i, text in enumerate(texts(24, 5)):
        params: dict[str, Any] = {"max_tokens": 2 + i % 5}
        if i >= 16:
            params["temperature"] = 0.9
            if i < 20:
                params["seed"] = i
        if i % 3:
            rows.append({"id": f"q{i}", "prompt": text, "params": params})
        else:
            rows.append({"id": f"q{i}", "messages": [{"role": "user", "content": text}], "params": params})
    return rows


@pytest.mark.timeout(600)
def test_a_second_job_of_the_same_requests_reuses_the_greedy_and_seeded_completions(
    settings: KafkaSettings, topics: Topics, tmp_path: Path, tiny_llama_folder: Path
) -> None:
    """The sampled requests without a seed are given a random one at submit, so each job samples
    its own: computed again. The reused completions are the first job's, token for token."""
    from model_import.causal_lm import import_causal_lm

    repository = import_causal_lm(tmp_path / "models", tiny_llama_folder, "tiny-llama").directory.parents[1]
    rows = generation_requests()
    source = tmp_path / "requests.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ids = [r["id"] for r in rows]
    pipeline = RunningPipeline(settings, topics, repository, tmp_path / "logs")
    try:
        pipeline.start("preprocess", "preprocess")
        pipeline.start("gpu", "gpu", "--model", "tiny-llama", "--engine", "transformers")
        first = submit(pipeline, source, model="tiny-llama")
        finish_and_check(pipeline, first, ids, tmp_path, timeout_s=300, reused=0)
        second = submit(pipeline, source, model="tiny-llama")
        finish_and_check(pipeline, second, ids, tmp_path, timeout_s=300, reused=20)
        before, again = (
            results_of(pipeline, first, tmp_path / "a.jsonl"),
            results_of(pipeline, second, tmp_path / "b.jsonl"),
        )
    finally:
        pipeline.stop()
    assert sorted(r for r in again if again[r].get("reused")) == sorted(ids[:20])
    for record_id in ids[:20]:
        assert (again[record_id]["text"], again[record_id]["finish_reason"]) == (
            before[record_id]["text"],
            before[record_id]["finish_reason"],
        ), record_id


@pytest.mark.timeout(600)
@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "no-reuse"])
def test_a_schedules_second_tick_over_an_unchanged_glob_reuses_every_record_unless_told_not_to(
    tiny: TinyModel, model_repository: Path, settings: KafkaSettings, topics: Topics, tmp_path: Path, reuse: bool
) -> None:
    drop = tmp_path / "drop"
    drop.mkdir()
    for n in range(2):
        (drop / f"{n}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts(60, 10 + n)))
    spec = ScheduleSpec("nightly", "* * * * *", str(drop / "*.jsonl"), "tiny", terms=JobTerms(reuse=reuse))
    add_schedule(settings, topics, new_schedule(spec, to_us(T0)))
    clock = Clock(T0)
    pipeline = RunningPipeline(settings, topics, model_repository, tmp_path / "logs")
    try:
        pipeline.start("preprocess", "preprocess")
        pipeline.start("gpu", "gpu", "--model", "tiny")
        with Scheduler(settings, topics, SchedulerSettings("sched"), clock=clock) as scheduler:
            for minute in (1, 2):
                clock.at(minute, 1)
                (job_id,) = scheduler.step()
                ids = [f"{n}.jsonl:{line}" for n in range(2) for line in range(1, 61)]
                tick_reused = len(ids) if reuse and minute == 2 else 0
                finish_and_check(pipeline, job_id, ids, tmp_path, timeout_s=300, reused=tick_reused)
    finally:
        pipeline.stop()


def test_no_reuse_is_kept_by_schedule_add_and_marks_every_record_produce_writes(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    pipeline = RunningPipeline(settings, topics, tmp_path / "models", tmp_path / "logs")
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts(3, 4)))
    for name, extra in (("kept", ()), ("computed", ("--no-reuse",))):
        added = pipeline.cli(
            "schedule", "add", name, "--cron", "0 3 * * *", "--input", str(source), "-m", "tiny", *extra
        )
        assert added.returncode == 0, added.stderr
    listed = {s["name"]: s["reuse"] for s in json.loads(pipeline.cli("schedule", "list", "--json").stdout)}
    assert listed == {"kept": True, "computed": False}

    for extra in ((), ("--no-reuse",)):
        done = pipeline.cli("produce", topics.raw_text, str(source), "-m", "tiny", *extra)
        assert done.returncode == 0, done.stderr
    marks = [header_of(m.headers, NO_REUSE_HEADER) or b"" for m in read_topics(settings, [topics.raw_text])]
    assert sorted(marks) == [b"", b"1"]  # one pack of three texts each: the second marked
