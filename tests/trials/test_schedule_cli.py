"""A one-minute schedule on wall-clock time, with two real scheduler processes and the real CLI."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs.registry import load_jobs
from jobs.scheduling.cron import tick_job_id
from kafka_io.groups import group_names, live_groups
from kafka_io.reading import read_topics
from schemas import Job
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline, feed_tensors
from tests.support.records import raw_texts_in
from tests.support.waiting import wait_until


@pytest.mark.long
def test_a_one_minute_schedule_fires_on_time_once_per_tick_with_two_schedulers_running(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    schedulers = [pipeline.start(f"scheduler-{n}", "scheduler", "--instance-id", f"sched-{n}") for n in "ab"]
    drop = tmp_path / "drop"
    drop.mkdir()
    write_jsonl(drop / "a.jsonl", example_lines(3))
    write_jsonl(drop / "b.jsonl", example_lines(4))
    added = pipeline.cli(
        "schedule", "add", "every-minute", "--cron", "* * * * *", "--input", str(drop / "*.jsonl"), "--model", "tiny"
    )
    assert added.returncode == 0, added.stderr
    assert "next tick" in added.stderr
    assert "note: no GPU worker serves tiny on this cluster now" in added.stderr  # none was started
    again = pipeline.cli("schedule", "add", "every-minute", "--cron", "* * * * *", "--input", "x", "--model", "tiny")
    assert again.returncode == 2 and "exists" in again.stderr
    bad = pipeline.cli("schedule", "add", "typo", "--cron", "* * *", "--input", "x", "--model", "tiny")
    assert bad.returncode == 2 and "five fields" in bad.stderr
    never = pipeline.cli("schedule", "add", "feb31", "--cron", "0 0 31 2 *", "--input", "x", "--model", "tiny")
    assert never.returncode == 2 and "never fires" in never.stderr and "Traceback" not in never.stderr
    empty = pipeline.cli("schedule", "add", "nothing", "--cron", "* * * * *", "--input", " ", "--model", "tiny")
    assert empty.returncode == 2 and "input is empty" in empty.stderr

    [listed] = json.loads(pipeline.cli("schedule", "list", "--json").stdout)
    assert (listed["name"], listed["state"]) == ("every-minute", "active")
    # the first whole minute after the schedule was added (which may have passed by now)
    added_at = datetime.fromisoformat(listed["active_since"])
    tick = added_at.replace(second=0, microsecond=0) + timedelta(minutes=1)
    expected_job = tick_job_id("every-minute", tick)

    def scheduled() -> dict[str, Job]:
        return {k: j for k, j in load_jobs(pipeline.settings, pipeline.topics).items() if j.schedule}

    until_s = (tick + timedelta(seconds=45) - datetime.now(UTC)).total_seconds()
    wait_until(scheduled, max(0.0, until_s), "a job of the tick", every_s=1, meanwhile=pipeline.check_workers)
    # kept, a sleep: no event says that no second job is coming; the losing scheduler, were it to
    # submit one too, would do so within these 5 s
    time.sleep(5)
    jobs = scheduled()
    assert list(jobs) == [expected_job]
    job = jobs[expected_job]
    registered = datetime.fromtimestamp(job.submitted_at / 1e6, UTC)
    assert tick <= registered < tick + timedelta(seconds=20), f"tick {tick}, job registered {registered}"
    assert job.total == 7  # both files of the glob, in one job
    raw = [m for m in read_topics(pipeline.settings, [pipeline.topics.raw_text])]
    assert sum(1 for t in raw_texts_in(raw) if t.job_id == expected_job) == 7  # records, packed or not

    logs = [w.log_path.read_text() for w in schedulers]
    assert sum(log.count(f"submitted job {expected_job}") for log in logs) == 1

    listed_jobs = pipeline.cli("jobs", "list").stdout
    assert f"{expected_job}\ttiny\tsubmitted\t0/7\tschedule every-minute" in listed_jobs

    assert pipeline.cli("schedule", "pause", "every-minute").returncode == 0
    [paused] = json.loads(pipeline.cli("schedule", "list", "--json").stdout)
    assert (paused["state"], paused["next_tick"], paused["last_job_id"]) == ("paused", None, expected_job)
    assert pipeline.cli("schedule", "resume", "every-minute").returncode == 0
    assert json.loads(pipeline.cli("schedule", "list", "--json").stdout)[0]["state"] == "active"
    assert pipeline.cli("schedule", "rm", "every-minute").returncode == 0
    assert pipeline.cli("schedule", "list").stdout == ""
    missing = pipeline.cli("schedule", "pause", "every-minute")
    assert missing.returncode == 1 and "no schedule every-minute" in missing.stderr


def test_schedule_add_notes_a_model_no_gpu_worker_serves_and_the_name_one_does(pipeline: RunningPipeline) -> None:
    pipeline.start("gpu", "gpu", "--model", "tiny")
    feed_tensors(pipeline.settings, pipeline.topics, "served-once", 3)
    group = pipeline.topics.gpu_group("tiny")
    # live, and known by name: Tansu lists only groups that have committed offsets
    wait_until(
        lambda: live_groups(pipeline.settings, [group]) and group in group_names(pipeline.settings),
        120,
        f"{group} live and listed",
        every_s=0.5,
        meanwhile=pipeline.check_workers,
    )
    served = pipeline.cli("schedule", "add", "served", "--cron", "0 3 * * *", "--input", "x", "--model", "tiny")
    assert served.returncode == 0, served.stderr
    assert "note:" not in served.stderr
    typo = pipeline.cli("schedule", "add", "typo", "--cron", "0 3 * * *", "--input", "x", "--model", "tinny")
    assert typo.returncode == 0, typo.stderr  # workers may come later: a note, not a refusal
    assert (
        f"note: no GPU worker serves tinny on this cluster now (consumer group {pipeline.topics.gpu_group('tinny')} "
        "has no member); did you mean tiny?"
    ) in typo.stderr
    # it said "so its jobs will wait for one", but a model the preprocess workers' repository lacks
    # has every record dead-lettered at once (tests/jobs/test_dlq.py), which waits for nothing (#40, 13)
    assert "will wait for one" not in typo.stderr
    assert (
        "Its jobs' records wait for one only if the preprocess workers' model repository has tinny; if it does "
        "not, every record is dead-lettered at preprocessing (ModelNotFoundError) until tinny is added there"
    ) in typo.stderr and "nearline dlq replay --job JOB" in typo.stderr


def test_schedule_add_refuses_a_name_that_could_not_begin_a_job_id(pipeline: RunningPipeline) -> None:
    # a schedule's name begins the job id of every run: a newline or a tab in it broke `jobs list`
    for name in ["night\nly", "night\tly", " nightly", "../x", "a..b", "x" * 86, "_nightly"]:
        added = pipeline.cli("schedule", "add", name, "--cron", "0 3 * * *", "--input", "x", "--model", "tiny")
        assert added.returncode == 2, (name, added.stderr)
        assert f"invalid schedule name {name!r}" in added.stderr or "characters)" in added.stderr, added.stderr
        assert "it begins the job id of every run" in added.stderr and "Traceback" not in added.stderr
    longest = "x" * 85
    added = pipeline.cli("schedule", "add", longest, "--cron", "0 3 * * *", "--input", "x", "--model", "tiny")
    assert added.returncode == 0, added.stderr
    listed = pipeline.cli("schedule", "list")
    assert listed.returncode == 0 and longest in listed.stdout, listed.stderr
    assert "night" not in listed.stdout
