"""Backpressure against the real broker: submit refuses past --max-backlog; preprocessing pauses
while the GPU side lags."""

from __future__ import annotations

from pathlib import Path

from jobs.launch.local import WorkerProcess
from jobs.launch.runner import WaitRules, watch_job
from kafka_io.reading import read_topics
from tests.support.inputs import example_lines, write_jsonl
from tests.support.job_checks import assert_exactly_one_result_each
from tests.support.pipeline import RunningPipeline, submit
from tests.support.records import raw_texts_in, tensor_rows
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until


def wait_until_held(pipeline: RunningPipeline, pre: WorkerProcess) -> None:
    """Until the preprocess worker says backpressure paused its bulk lane (its log)."""
    wait_until(
        pre.log_tail,
        120,
        "backpressure holding the bulk lane",
        until=lambda log: "pausing the bulk lane" in log,
        every_s=0.5,
        meanwhile=pipeline.check_workers,
    )


def test_submit_refuses_a_job_that_would_pass_the_maximum_backlog(pipeline: RunningPipeline, tmp_path: Path) -> None:
    first = write_jsonl(tmp_path / "a.jsonl", example_lines(100))
    submit(pipeline, first)  # no workers: all 100 wait
    second = write_jsonl(tmp_path / "b.jsonl", example_lines(50))
    refused = pipeline.cli("submit", str(second), "--model", "tiny", "--max-backlog", "120")
    assert refused.returncode == 5
    assert "the backlog is 100 records" in refused.stderr and "adds 50" in refused.stderr
    assert "maximum of 120" in refused.stderr
    assert len(raw_texts_in(read_topics(pipeline.settings, [pipeline.topics.raw_text]))) == 100  # nothing produced
    assert pipeline.cli("submit", str(second), "--model", "tiny", "--max-backlog", "150").returncode == 0


def test_submit_refuses_a_job_larger_than_the_maximum_backlog_without_telling_to_retry(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    """No wait and no extra worker can ever let such a job in: "retry later" would loop forever."""
    rows = write_jsonl(tmp_path / "in.jsonl", example_lines(50))
    refused = pipeline.cli("submit", str(rows), "--model", "tiny", "--max-backlog", "10")
    assert refused.returncode == 5
    assert "this job alone has 50 records, over the maximum backlog of 10" in refused.stderr
    assert "split it" in refused.stderr and "Retry later" not in refused.stderr
    assert pipeline.cli("submit", str(rows), "--model", "tiny", "--max-backlog", "49").returncode == 5
    assert not list(read_topics(pipeline.settings, [pipeline.topics.raw_text]))  # nothing produced
    assert pipeline.cli("submit", str(rows), "--model", "tiny", "--max-backlog", "50").returncode == 0


def test_preprocessing_pauses_while_the_gpu_group_lags_and_resumes_when_it_catches_up(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    rows = example_lines(600)
    pre = pipeline.start("preprocess", "preprocess", "--max-tensor-lag", "30")
    job_id = submit(pipeline, write_jsonl(tmp_path / "in.jsonl", rows))
    # join, one batch through, then the gate closes: no GPU worker is consuming
    wait_until_held(pipeline, pre)
    held = len(tensor_rows(pipeline.settings, pipeline.topics.tensors("tiny")))  # records, not packs
    assert 0 < held <= 3 * 64, f"{held} tensor records produced while the GPU side consumed none"
    pipeline.start("gpu", "gpu", "--model", "tiny")
    outcome, _ = watch_job(
        pipeline.settings, pipeline.topics, job_id, len(rows), WaitRules(check=pipeline.check_workers, timeout_s=180)
    )
    assert len(outcome.results) == len(rows)


def test_a_preprocess_worker_held_by_backpressure_stops_at_once_on_sigterm_and_loses_nothing(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    """Held, it waited for a GPU group that never caught up while faust waited for it: SIGTERM went
    unanswered (faust's wait_empty every 10 s) until the SIGKILL after the grace; under
    Kubernetes, every rollout of a held worker. It now finishes the batch in hand and leaves."""
    rows = example_lines(600)
    pre = pipeline.start("preprocess", "preprocess", "--max-tensor-lag", "30")
    job_id = submit(pipeline, write_jsonl(tmp_path / "in.jsonl", rows))
    wait_until_held(pipeline, pre)
    code = pre.stop(timeout_s=30)  # SIGTERM, then SIGKILL if it has not left by then
    assert code == 0, f"exit {code}:\n{pre.log_tail()}"
    assert "wait_empty" not in pre.log_tail(200)
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    outcome, _ = watch_job(
        pipeline.settings, pipeline.topics, job_id, len(rows), WaitRules(check=pipeline.check_workers, timeout_s=180)
    )
    assert sorted(outcome.results) == sorted(r["id"] for r in rows) and not outcome.dead
    assert_exactly_one_result_each(pipeline, job_id, [r["id"] for r in rows], tmp_path / "out.jsonl")
