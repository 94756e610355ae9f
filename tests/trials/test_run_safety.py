"""`nearline run` and `submit --wait` under failure: a bad -o, signals, a dead broker, gone workers.

Real child processes and real signals; the embedded runs start their own broker, as README command 1 does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.job_input import JobInput
from jobs.launch.runner import RunSettings, run_job
from kafka_io.broker import EmbeddedBroker
from kafka_io.groups import live_groups
from tests.support.inputs import many_lines
from tests.support.pipeline import RunningPipeline, run_embedded
from tests.support.processes import EmbeddedRun, assert_all_gone, cmdline, descendants, mid_job, running, stop_mid_job
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until


@pytest.fixture
def reaper() -> Iterator[set[int]]:
    """PIDs a test saw; any still running at the end are killed, so a failing test leaks nothing."""
    pids: set[int] = set()
    yield pids
    for pid in pids:
        if running(pid) and ("jobs.cli" in cmdline(pid) or "tansu" in cmdline(pid)):
            os.kill(pid, signal.SIGKILL)


def test_a_missing_output_folder_is_a_usage_error_before_any_work(
    tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    source = many_lines(tmp_path / "in.jsonl", 10)
    started = time.monotonic()
    done = run_embedded(
        str(source), "--model", "tiny", "-o", str(tmp_path / "missing" / "out.jsonl"),
        repository=model_repository, timeout_s=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr
    assert "embedded broker" not in done.stderr and "submitted" not in done.stderr
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(
    ("name", "said"),
    [("out.csv", "does not write CSV"), ("out.JSON", "does not write JSON"), ("out.jsonl.gz", "does not compress")],
)
def test_an_output_named_for_a_format_not_written_is_a_usage_error_before_any_work(
    name: str, said: str, tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    source = many_lines(tmp_path / "in.jsonl", 10)
    done = run_embedded(str(source), "--model", "tiny", "-o", str(tmp_path / name), repository=model_repository)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and ".jsonl (JSON Lines), .parquet or .arrow" in done.stderr, done.stderr
    assert "--output-format jsonl" in done.stderr and "Traceback" not in done.stderr
    assert "embedded broker" not in done.stderr and sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_json_lines_under_another_name_are_written_when_asked_for_and_said_when_not(
    tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    source = many_lines(tmp_path / "in.jsonl", 10)
    for name, flags in (("out.csv", ("--output-format", "jsonl")), ("out.txt", ())):
        out = tmp_path / name
        done = run_embedded(str(source), "--model", "tiny", "-o", str(out), *flags, repository=model_repository)
        assert done.returncode == 0, done.stderr
        assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [f"r{i}" for i in range(10)]
        noted = f"note: writing JSON Lines to {out}" in done.stderr
        assert noted == (not flags), done.stderr


def test_a_run_that_gets_no_result_leaves_an_earlier_output_as_it_was(
    tiny: TinyModel, model_repository: Path, tmp_path: Path, reaper: set[int]
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("a complete file from an earlier run\n")
    # given up 0.05 s after the submit (noticed at the follower's first 0.2 s poll): the workers,
    # started just before the submit, take longer than that to import Python
    run = EmbeddedRun(str(many_lines(tmp_path / "in.jsonl", 200)), "--model", "tiny", "-o", str(out),
                      "--timeout-s", "0.05", repository=model_repository)  # fmt: skip
    run.wait_for("embedded broker on")
    reaper |= descendants(run.process.pid)
    code, stderr = run.finish(timeout_s=60)
    assert code == 7, stderr
    assert "no results came back; -o was left as it was" in stderr and "Traceback" not in stderr
    assert out.read_text() == "a complete file from an earlier run\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]


def test_an_output_that_is_the_input_is_a_usage_error(tiny: TinyModel, model_repository: Path, tmp_path: Path) -> None:
    source = many_lines(tmp_path / "in.jsonl", 10)
    before = source.read_bytes()
    link = tmp_path / "same.jsonl"
    link.symlink_to(source)
    for output in (source, link):
        done = run_embedded(str(source), "--model", "tiny", "-o", str(output), repository=model_repository)
        assert done.returncode == 2, done.stderr
        assert "is the input" in done.stderr
    assert source.read_bytes() == before


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_stops_the_broker_and_workers_like_ctrl_c(
    sig: signal.Signals, tiny: TinyModel, model_repository: Path, tmp_path: Path, reaper: set[int]
) -> None:
    run = EmbeddedRun(str(many_lines(tmp_path / "in.jsonl", 20_000)), "--model", "tiny",
                      repository=model_repository)  # fmt: skip
    run.wait_for("embedded broker on")
    children = descendants(run.process.pid)
    reaper |= children
    assert any("tansu" in cmdline(p) for p in children) and sum("worker" in cmdline(p) for p in children) == 2
    run.process.send_signal(sig)
    code, stderr = run.finish(timeout_s=45)
    assert code == 128 + sig, stderr
    assert "Traceback" not in stderr
    assert_all_gone(children, timeout_s=5)


def test_a_sigterm_mid_job_writes_the_results_so_far_beside_the_output_not_over_it(
    tiny: TinyModel, model_repository: Path, tmp_path: Path, reaper: set[int]
) -> None:
    out, total = tmp_path / "out.jsonl", 20_000
    out.write_text("a complete file from an earlier run\n")
    run = EmbeddedRun(str(many_lines(tmp_path / "in.jsonl", total)), "--model", "tiny", "-o", str(out),
                      repository=model_repository)  # fmt: skip
    reaper |= stop_mid_job(run, signal.SIGTERM)
    code, stderr = run.finish(timeout_s=45)
    assert code == 128 + signal.SIGTERM, stderr
    assert "stopped by SIGTERM" in stderr and "Traceback" not in stderr
    assert out.read_text() == "a complete file from an earlier run\n"
    partial = tmp_path / "out.partial.jsonl"
    lines = partial.read_text().splitlines()
    assert 0 < len(lines) < total and f"wrote {len(lines)} lines to {partial}" in stderr


def test_a_finished_run_has_ended_its_broker_and_workers_when_it_exits(
    tiny: TinyModel, model_repository: Path, tmp_path: Path, reaper: set[int]
) -> None:
    out = tmp_path / "out.jsonl"
    run = EmbeddedRun(str(many_lines(tmp_path / "in.jsonl", 50)), "--model", "tiny", "-o", str(out),
                      repository=model_repository)  # fmt: skip
    run.wait_for("embedded broker on")
    children = descendants(run.process.pid)
    reaper |= children
    code, stderr = run.finish(timeout_s=120)
    assert code == 0, stderr
    assert len(out.read_text().splitlines()) == 50
    # killed once every result is in (nothing they hold is wanted any more), and reaped before the exit
    assert_all_gone(children, timeout_s=0)


def test_a_ctrl_c_after_the_last_result_leaves_no_results_spill_on_disk(
    tiny: TinyModel, model_repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spill can be gigabytes: an interrupt while `run` stops its broker must remove it too."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def interrupted(self: EmbeddedBroker) -> None:
        self.stop()
        raise KeyboardInterrupt

    monkeypatch.setattr(EmbeddedBroker, "kill", interrupted)
    source = JobInput(many_lines(tmp_path / "in.jsonl", 5), "text")
    with pytest.raises(KeyboardInterrupt):
        run_job(source, "tiny", RunSettings(model_repository, timeout_s=120), log=lambda _: None)
    assert not list(scratch.glob("nearline-results-*"))


def test_the_broker_and_workers_die_with_a_sigkilled_run(
    tiny: TinyModel, model_repository: Path, tmp_path: Path, reaper: set[int]
) -> None:
    run = EmbeddedRun(str(many_lines(tmp_path / "in.jsonl", 20_000)), "--model", "tiny",
                      repository=model_repository)  # fmt: skip
    run.wait_for("embedded broker on")
    children = descendants(run.process.pid)
    reaper |= children
    run.process.kill()
    run.finish(timeout_s=10)
    # workers get SIGTERM (they may finish a batch), the broker SIGKILL
    assert_all_gone(children, timeout_s=30)


def test_the_workers_of_a_run_sigkilled_mid_job_are_gone_within_seconds(
    tiny: TinyModel, model_repository: Path, tmp_path: Path, reaper: set[int]
) -> None:
    """They get SIGTERM as their parent dies, but the broker died with it, so a graceful stop
    cannot finish: the preprocess worker retried its commit for good."""
    run = EmbeddedRun(str(many_lines(tmp_path / "in.jsonl", 20_000)), "--model", "tiny",
                      repository=model_repository)  # fmt: skip
    children = stop_mid_job(run, signal.SIGKILL)
    reaper |= children
    run.finish(timeout_s=10)
    assert_all_gone(children, timeout_s=40)  # the workers' grace is 10 s once their parent is gone


def test_a_dead_embedded_broker_is_named_at_once_and_the_results_so_far_are_written(
    tiny: TinyModel, model_repository: Path, tmp_path: Path, reaper: set[int]
) -> None:
    out = tmp_path / "out.jsonl"
    total = 20_000
    run = EmbeddedRun(str(many_lines(tmp_path / "in.jsonl", total)), "--model", "tiny", "-o", str(out),
                      repository=model_repository)  # fmt: skip
    # killed once the run has read some results and before the job can complete (mid_job): a
    # broker killed once results were stored, but before the run read any, left nothing to write
    with mid_job(run) as children:
        reaper |= children
        (broker,) = [p for p in children if "tansu" in cmdline(p)]
        killed = time.monotonic()
        os.kill(broker, signal.SIGKILL)
    code, stderr = run.finish(timeout_s=60)
    assert code == 6, stderr
    assert time.monotonic() - killed < 20, stderr
    assert "embedded broker exited" in stderr and "Traceback" not in stderr
    assert not out.exists()
    lines = (tmp_path / "out.partial.jsonl").read_text().splitlines()
    assert 0 < len(lines) < total
    assert f"wrote {len(lines)} lines" in stderr
    assert_all_gone(children, timeout_s=5)


def submit_wait(pipeline: RunningPipeline, source: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = pipeline.cli("submit", str(source), "--model", "tiny", "--wait", *extra)
    return done, time.monotonic() - started


def test_submit_wait_gives_up_with_exit_6_once_the_workers_are_gone(pipeline: RunningPipeline, tmp_path: Path) -> None:
    source = many_lines(tmp_path / "in.jsonl", 20)
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    done, _ = submit_wait(pipeline, source, "--worker-grace-s", "5")
    assert done.returncode == 0, done.stderr  # live workers are not mistaken for gone ones
    group = pipeline.topics.gpu_group("tiny")
    assert live_groups(pipeline.settings, [group]) == {group}  # the signal itself, not only progress
    pipeline.stop()
    done, seconds = submit_wait(pipeline, source, "--worker-grace-s", "5")
    assert done.returncode == 6, done.stderr
    assert "no GPU worker for tiny alive" in done.stderr and "Traceback" not in done.stderr
    assert seconds < 40


def test_submit_wait_names_the_preprocess_stage_when_only_a_gpu_worker_runs(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    pipeline.start("gpu", "gpu", "--model", "tiny")  # live, but nothing reaches it: it would wait for ever
    done, seconds = submit_wait(pipeline, many_lines(tmp_path / "in.jsonl", 5), "--worker-grace-s", "5")
    assert done.returncode == 6, done.stderr
    assert "no preprocess worker alive" in done.stderr and "5 record(s)" in done.stderr, done.stderr
    assert "nearline worker preprocess" in done.stderr and "Traceback" not in done.stderr
    assert seconds < 60


def test_submit_wait_names_the_preprocess_stage_when_its_worker_was_sigkilled(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    # Tansu reports the group of a SIGKILLed faust worker STABLE, with no member list, for a
    # while: going by state alone, submit --wait waited on it (#30 review finding 1)
    preprocess = pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    group = pipeline.topics.preprocess_app_id
    wait_until(
        lambda: live_groups(pipeline.settings, [group]),
        120,
        "the preprocess worker in its group",
        until=lambda live: live == {group},
        every_s=0.5,
    )
    preprocess.process.send_signal(signal.SIGKILL)
    preprocess.process.wait()
    done, _ = submit_wait(pipeline, many_lines(tmp_path / "in.jsonl", 5), "--worker-grace-s", "5")
    assert done.returncode == 6, done.stderr
    assert "no preprocess worker alive" in done.stderr and "5 record(s)" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_submit_wait_gives_up_with_exit_7_after_timeout(pipeline: RunningPipeline, tmp_path: Path) -> None:
    done, seconds = submit_wait(pipeline, many_lines(tmp_path / "in.jsonl", 5), "--timeout-s", "3")
    assert done.returncode == 7, done.stderr
    assert "0 of 5 records done" in done.stderr and "Traceback" not in done.stderr
    assert seconds < 30


def test_an_input_with_no_record_is_refused_by_name(tiny: TinyModel, model_repository: Path, tmp_path: Path) -> None:
    """Refused (#30) as submit refuses it, before any broker or worker starts; once a warning."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")  # blank lines are no records
    out = tmp_path / "out.jsonl"
    done = run_embedded(str(empty), "--model", "tiny", "-o", str(out), repository=model_repository)
    assert done.returncode == 2, done.stderr
    assert f"error: {empty} holds no records: nothing was submitted" in done.stderr
    assert "embedded broker" not in done.stderr and not out.exists()


def job_state(pipeline: RunningPipeline, job_id: str) -> str | None:
    status = pipeline.cli("status", job_id, "--json")
    return json.loads(status.stdout)["state"] if status.returncode == 0 else None


def test_submit_wait_stops_with_exit_8_soon_after_its_job_is_cancelled(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    # #40 defect 4: the wait sat on its progress line until --timeout (then exit 7, no word of the cancel)
    source = many_lines(tmp_path / "in.jsonl", 40)
    job_id = "job-cwait"
    pipeline.start("preprocess", "preprocess")  # no GPU worker: the job cannot complete by itself
    # neither --worker-grace-s nor --timeout-s may be what ends this wait
    args = ["submit", str(source), "--model", "tiny", "--job-id", job_id, "--wait", "--worker-grace-s", "600"]
    wait = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", *args, "--timeout-s", "100"],
        env=pipeline.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def waiting() -> None:
            assert wait.poll() is None, wait.communicate()

        wait_until(  # registered, and being worked on
            lambda: job_state(pipeline, job_id),
            60,
            f"job {job_id} running",
            until=lambda state: state == "running",
            every_s=0.5,
            meanwhile=waiting,
        )
        assert pipeline.cli("cancel", job_id).returncode == 0
        cancelled = time.monotonic()
        _, stderr = wait.communicate(timeout=90)
    finally:
        wait.kill()
    assert wait.returncode == 8, stderr
    assert time.monotonic() - cancelled < 30, stderr  # well under the --timeout of 100 s
    assert f"job {job_id} was cancelled (nearline cancel) with 0 of 40 records done" in stderr, stderr
    assert "error:" not in stderr and "Traceback" not in stderr

    # the same job id submitted again is a new submission: the old one's cancel does not stop its wait
    pipeline.start("gpu", "gpu", "--model", "tiny")
    again, _ = submit_wait(pipeline, source, "--job-id", job_id, "--timeout-s", "100")
    assert again.returncode == 0, again.stderr


def test_submit_wait_gives_up_with_exit_6_soon_after_the_only_gpu_worker_is_sigkilled(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    # #40 defect 5: Tansu keeps the group of a SIGKILLed GPU worker STABLE with no members listed
    # for minutes; going by state alone the wait ran to --timeout (exit 7)
    pipeline.start("preprocess", "preprocess")
    gpu = pipeline.start("gpu", "gpu", "--model", "tiny")
    warm, _ = submit_wait(pipeline, many_lines(tmp_path / "warm.jsonl", 5), "--worker-grace-s", "10")
    assert warm.returncode == 0, warm.stderr  # a live GPU worker with nothing left to do is not blamed
    group = pipeline.topics.gpu_group("tiny")
    assert live_groups(pipeline.settings, [group]) == {group}
    gpu.process.send_signal(signal.SIGKILL)
    gpu.process.wait()
    # --no-reuse: the warm-up's texts again, which the preprocess worker would answer from the cache
    done, seconds = submit_wait(
        pipeline, many_lines(tmp_path / "in.jsonl", 5), "--no-reuse", "--worker-grace-s", "10", "--timeout-s", "100"
    )
    assert done.returncode == 6, done.stderr
    assert "no GPU worker for tiny alive" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert seconds < 60, done.stderr  # grace 10 s: well under the --timeout of 100 s
