"""Jobs as objects: jobs list, status (with --watch) and submit --wait, against real workers."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from jobs.registry import find_job
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until


def test_a_job_is_listed_watched_and_waited_for(pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path) -> None:
    """The watch's first report has no rate yet; later ones have rate and ETA. The GPU worker starts
    only once the first report is out, so the job is still running then however fast it runs."""
    rows = example_lines(300)
    pipeline.start("preprocess", "preprocess")
    done = pipeline.cli("submit", str(write_jsonl(tmp_path / "in.jsonl", rows)), "--model", "tiny")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()

    watch = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "status", job_id, "--watch"],
        env=pipeline.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert watch.stdout is not None
    first = watch.stdout.readline()
    assert first.startswith(job_id) and ": 0/300 done" in first and "ETA" not in first, first  # no GPU worker yet
    pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "2", "--max-linger-ms", "0")
    rest, errors = watch.communicate(timeout=120)
    assert watch.returncode == 0, errors
    lines = [first.rstrip("\n"), *rest.splitlines()]
    assert lines[-1].startswith(f"{job_id} completed: 300/300 done (preprocessed 300, inferred 300, dead-lettered 0)")
    assert any("rec/s  ETA" in line for line in lines)

    status = json.loads(pipeline.cli("status", job_id, "--json").stdout)
    assert status["state"] == "completed"
    assert status["counts"] == {
        "submitted": 300,
        "preprocessed": 300,
        "inferred": 300,
        "reused": 0,
        "dead_lettered": 0,
        "cancelled": 0,
        "expired": 0,
    }
    listed = json.loads(pipeline.cli("jobs", "list", "--json").stdout)
    assert [(j["job_id"], j["state"], j["counts"]["inferred"]) for j in listed] == [(job_id, "completed", 300)]
    assert pipeline.cli("status", "job-nope").returncode == 1


def test_submit_wait_exits_0_when_all_succeed_and_4_when_some_dead_letter(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    good = write_jsonl(tmp_path / "good.jsonl", example_lines(20))
    ok = pipeline.cli("submit", str(good), "--model", "tiny", "--wait")
    assert ok.returncode == 0, ok.stderr
    assert "0 dead-lettered" in ok.stderr
    missing_model = f"nope{uuid.uuid4().hex[:6]}"
    bad = pipeline.cli("submit", str(good), "--model", missing_model, "--wait")
    assert bad.returncode == 4, bad.stderr
    assert "20 dead-lettered" in bad.stderr
    job_id = bad.stdout.strip()
    status = json.loads(pipeline.cli("status", job_id, "--json").stdout)
    assert status["state"] == "completed_with_errors"
    assert status["counts"]["dead_lettered"] == 20


def test_cancelled_jobs_are_skipped_by_both_stages_and_counted_as_cancelled(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    rows = example_lines(200)
    source = str(write_jsonl(tmp_path / "in.jsonl", rows))

    def status(job_id: str) -> dict[str, Any]:
        return json.loads(pipeline.cli("status", job_id, "--json").stdout)

    def wait_for(job_id: str, key: str, value: int) -> None:
        wait_until(
            lambda: status(job_id)["counts"][key],
            120,
            f"{job_id}'s {key} count at {value}",
            until=lambda count: count == value,
            every_s=0.5,
        )

    # cancelled after preprocessing, before inference: the GPU worker skips every record
    pre = pipeline.start("preprocess", "preprocess")
    first = pipeline.cli("submit", source, "--model", "tiny").stdout.strip()
    wait_for(first, "preprocessed", 200)
    assert pipeline.cli("cancel", first).returncode == 0
    pipeline.start("gpu", "gpu", "--model", "tiny")
    # cancelled before preprocessing: the preprocess worker skips every record
    pre.stop()
    second = pipeline.cli("submit", source, "--model", "tiny").stdout.strip()
    assert pipeline.cli("cancel", second).returncode == 0
    pipeline.start("preprocess", "preprocess")
    # a third job, not cancelled, shows the workers kept working
    third = pipeline.cli("submit", source, "--model", "tiny", "--wait")
    assert third.returncode == 0, third.stderr

    # Each job's records sit on every partition, before the third job's: the third job done means
    # both workers have read past every record of the first two, skipping them.
    one, two = status(first), status(second)
    assert one["state"] == two["state"] == "cancelled"
    assert one["counts"] == {
        "submitted": 200,
        "preprocessed": 200,
        "inferred": 0,
        "reused": 0,
        "dead_lettered": 0,
        "cancelled": 200,
        "expired": 0,
    }
    assert two["counts"] == {
        "submitted": 200,
        "preprocessed": 0,
        "inferred": 0,
        "reused": 0,
        "dead_lettered": 0,
        "cancelled": 200,
        "expired": 0,
    }
    assert pipeline.cli("cancel", "job-nope").returncode == 1


def test_a_cancelled_job_submitted_again_with_the_same_id_runs_and_counts_only_the_new_submission(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    rows = example_lines(1000)
    source = str(write_jsonl(tmp_path / "in.jsonl", rows))
    job_id = f"job-again-{uuid.uuid4().hex[:6]}"
    # the first submission is cancelled before any worker runs: its records must stay skipped
    assert pipeline.cli("submit", source, "--model", "tiny", "--job-id", job_id).returncode == 0
    assert pipeline.cli("cancel", job_id).returncode == 0
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "8", "--max-linger-ms", "0")
    # another job done means both workers follow the jobs topic and have skipped the first submission
    # (texts of its own: a text of the job's would be reused from its result, docs/reuse.md)
    warm_rows = example_lines(1005)[1000:]
    warm = pipeline.cli("submit", str(write_jsonl(tmp_path / "w.jsonl", warm_rows)), "--model", "tiny", "--wait")
    assert warm.returncode == 0, warm.stderr

    # submitted again while the workers still see the cancellation: the new records run
    again = pipeline.cli("submit", source, "--model", "tiny", "--job-id", job_id)
    assert again.returncode == 0, again.stderr
    status = wait_until(
        lambda: json.loads(pipeline.cli("status", job_id, "--json").stdout),
        90,
        f"{job_id} completed",
        until=lambda s: s["state"] == "completed",
        every_s=1,
    )
    assert status["counts"] == {
        "submitted": 1000,
        "preprocessed": 1000,
        "inferred": 1000,
        "reused": 0,
        "dead_lettered": 0,
        "cancelled": 0,
        "expired": 0,
    }
    results = pipeline.cli("results", job_id)
    assert results.returncode == 0, results.stderr
    ids = [json.loads(line)["id"] for line in results.stdout.splitlines()]
    assert len(ids) == len(set(ids)) == 1000


def test_jobs_list_and_status_agree_on_a_job_that_is_preprocessed_but_not_inferred(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    """Both commands fold the same topics by the same rule: a job whose records are preprocessed
    (no GPU worker yet) is `running` in both, with the same counts."""
    pipeline.start("preprocess", "preprocess")
    done = pipeline.cli("submit", str(write_jsonl(tmp_path / "in.jsonl", example_lines(40))), "--model", "tiny")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    status = wait_until(
        lambda: json.loads(pipeline.cli("status", job_id, "--json").stdout),
        60,
        f"{job_id}'s 40 records preprocessed",
        until=lambda s: s["counts"]["preprocessed"] >= 40,
        every_s=0.5,
    )
    listed = json.loads(pipeline.cli("jobs", "list", "--json").stdout)
    assert status["state"] == "running"
    assert [j for j in listed if j["job_id"] == job_id] == [status]


def test_cancel_says_a_job_had_already_ended_and_changes_nothing(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    """Cancelling a completed job printed "cancelled" and exited 0 while nothing changed."""
    source = str(write_jsonl(tmp_path / "in.jsonl", example_lines(5)))
    waiting = pipeline.cli("submit", source, "--model", "tiny").stdout.strip()  # no worker yet
    assert pipeline.cli("cancel", waiting).returncode == 0
    again = pipeline.cli("cancel", waiting)
    assert again.returncode == 0 and f"job {waiting} was already cancelled" in again.stderr, again.stderr

    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    done = pipeline.cli("submit", source, "--model", "tiny", "--wait")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    late = pipeline.cli("cancel", job_id)
    assert late.returncode == 1
    assert f"error: job {job_id} had already completed, so nothing was cancelled" in late.stderr, late.stderr
    assert f"cancelled {job_id}" not in late.stderr
    status = json.loads(pipeline.cli("status", job_id, "--json").stdout)
    assert status["state"] == "completed" and status["counts"]["cancelled"] == 0
    assert find_job(pipeline.settings, pipeline.topics, job_id).cancelled_at is None  # the registry row is as it was


def test_a_second_cancel_of_a_running_job_says_it_was_already_cancelled(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    """#30 C7: the case above for a running job (a worker has preprocessed its records; without a GPU
    worker it stays running until cancelled). The second cancel exits as the first did and
    registers nothing again."""
    pipeline.start("preprocess", "preprocess")
    done = pipeline.cli("submit", str(write_jsonl(tmp_path / "in.jsonl", example_lines(40))), "--model", "tiny")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    wait_until(
        lambda: json.loads(pipeline.cli("status", job_id, "--json").stdout),
        60,
        f"{job_id} running",
        until=lambda s: s["state"] == "running",
        every_s=0.5,
    )
    first = pipeline.cli("cancel", job_id)
    assert first.returncode == 0 and first.stderr == f"cancelled {job_id}\n", first.stderr
    cancelled_at = find_job(pipeline.settings, pipeline.topics, job_id).cancelled_at
    assert cancelled_at is not None
    again = pipeline.cli("cancel", job_id)
    assert again.returncode == 0, again.stderr
    assert again.stderr.startswith(f"job {job_id} was already cancelled: {job_id} cancelled: 0/40 done"), again.stderr
    assert f"cancelled {job_id}\n" not in again.stderr
    assert find_job(pipeline.settings, pipeline.topics, job_id).cancelled_at == cancelled_at  # not registered again
    status = json.loads(pipeline.cli("status", job_id, "--json").stdout)
    assert status["state"] == "cancelled" and status["counts"]["cancelled"] == 40, status
