"""Crash recovery: real worker processes SIGKILLed at random points, restarted, nothing lost.

Trials are few and bounded (3 GPU-worker kills, 2 more with both priority lanes busy, 3
preprocess-worker kills, one with both lanes busy, 2 submit kills, one two-worker failover); each
asserts that every input record ends with exactly one result as `nearline results` reports it.
Random points come from a seeded generator, printed on failure.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from jobs.launch.runner import WaitRules, watch_job
from jobs.registry import job_status
from kafka_io.broker import EmbeddedBroker
from results.outcome import read_outcome
from tests.support.apache_kafka import ApacheKafka
from tests.support.image_corpus import real_photos
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline, finish_and_check, follow_until, submit
from tests.support.records import copies_of, tensor_rows
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until

RNG = random.Random(20261129)


@pytest.mark.long
@pytest.mark.parametrize("trial", range(3))
def test_the_gpu_worker_killed_at_a_random_point_loses_nothing(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path, trial: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Packs of 16, as in the two-lane trial below: with the default 128 a poll window holds whole
    # packs, and on a loaded host two windows confirmed within one follower poll jumped from below
    # a kill point past the job's end (the kill then "landed after the job").
    monkeypatch.setenv("NEARLINE_PACK_RECORDS", "16")
    rows = example_lines(1200)
    kill_at = RNG.randint(60, 900)
    pipeline.start("preprocess", "preprocess")
    gpu = pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "1", "--max-linger-ms", "0")
    job_id = submit(pipeline, write_jsonl(tmp_path / "in.jsonl", rows))
    reached = follow_until(pipeline, pipeline.topics.results, job_id, kill_at)
    gpu.process.send_signal(signal.SIGKILL)
    gpu.process.wait()
    assert reached < len(rows), f"trial {trial}: the kill at {kill_at} landed after the job"
    pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "16")
    finish_and_check(pipeline, job_id, [r["id"] for r in rows], tmp_path, timeout_s=180)


@pytest.mark.long
@pytest.mark.parametrize("trial", range(2))
def test_the_gpu_worker_killed_with_both_lanes_busy_loses_nothing_in_either(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path, trial: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while it ran a live job ahead of a backfill (#35): its windows in flight came from
    both lanes, committed over one ledger; after a restart each job completes exactly once."""
    # Packs of 16: a poll window never splits a pack, so with the default 128 the live job's 300
    # results came 128 at a time, and two windows confirmed within one follower poll jumped past
    # a kill point above 128 straight to the end of the job (the kill then "came late").
    monkeypatch.setenv("NEARLINE_PACK_RECORDS", "16")
    rows = example_lines(1200)
    # texts of their own: the backfill's would be reused from its results, never reaching the engine
    live_rows = [{"id": f"live-{r['id']}", "text": f"live: {r['text']}"} for r in example_lines(300)]
    kill_at = RNG.randint(10, 250)
    pipeline.start("preprocess", "preprocess")
    gpu = pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "1", "--max-linger-ms", "0")
    batch_id = submit(pipeline, write_jsonl(tmp_path / "backfill.jsonl", rows))
    follow_until(pipeline, pipeline.topics.results, batch_id, 30)  # the backfill is under way
    # Both lanes busy by construction: the GPU worker is frozen until every live record waits in
    # its lane, else a fast machine finishes the backfill before the live job is even submitted.
    gpu.process.send_signal(signal.SIGSTOP)
    try:
        live_id = submit(pipeline, write_jsonl(tmp_path / "live.jsonl", live_rows), "--priority", "live")
        live_tensors = pipeline.topics.lane(pipeline.topics.tensors("tiny"), "live")
        follow_until(pipeline, live_tensors, live_id, len(live_rows))
    finally:
        gpu.process.send_signal(signal.SIGCONT)
    reached = follow_until(pipeline, pipeline.topics.results, live_id, kill_at)
    gpu.process.send_signal(signal.SIGKILL)
    gpu.process.wait()
    backfill_done = job_status(pipeline.settings, pipeline.topics, batch_id).done
    assert reached < len(live_rows) and backfill_done < len(rows), f"trial {trial}: the kill at {kill_at} came late"
    pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "16")
    finish_and_check(pipeline, live_id, [r["id"] for r in live_rows], tmp_path, timeout_s=180)
    finish_and_check(pipeline, batch_id, [r["id"] for r in rows], tmp_path, timeout_s=180)


@pytest.mark.long
def test_the_preprocess_worker_killed_with_both_lanes_busy_loses_nothing_in_either(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    """Killed while its live agent and its batch agent both had records (#35): each lane's
    offsets are committed by its own agent, and after a restart each job completes exactly once."""
    rows = example_lines(1200)
    live_rows = [{"id": f"live-{r['id']}", "text": f"live: {r['text']}"} for r in example_lines(600)]
    batch_id = submit(pipeline, write_jsonl(tmp_path / "backfill.jsonl", rows))
    live_id = submit(pipeline, write_jsonl(tmp_path / "live.jsonl", live_rows), "--priority", "live")
    kill_at = RNG.randint(20, 300)
    pre = pipeline.start("preprocess", "preprocess")
    live_tensors = pipeline.topics.lane(pipeline.topics.tensors("tiny"), "live")
    reached = follow_until(pipeline, live_tensors, live_id, kill_at)
    pre.process.send_signal(signal.SIGKILL)
    pre.process.wait()
    tensors = tensor_rows(pipeline.settings, pipeline.topics.tensors("tiny"))
    backfill_tensors = sum(1 for row in tensors if row.job_id == batch_id)
    assert reached < len(live_rows), f"the kill at {kill_at} landed after the live job was preprocessed"
    assert backfill_tensors < len(rows), f"the kill at {kill_at} landed after the backfill was preprocessed"
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    finish_and_check(pipeline, live_id, [r["id"] for r in live_rows], tmp_path, timeout_s=240)
    finish_and_check(pipeline, batch_id, [r["id"] for r in rows], tmp_path, timeout_s=240)


@pytest.mark.parametrize("trial", range(2))
def test_the_preprocess_worker_killed_at_a_random_point_loses_nothing(
    pipeline: RunningPipeline, efficientnet: object, tmp_path: Path, trial: int
) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(10):
        for p in real_photos():
            shutil.copy2(p, photos / f"{i:02d}-{p.name}")
    ids = sorted(p.name for p in photos.iterdir())
    kill_at = RNG.randint(20, len(ids) // 2)
    pre = pipeline.start("preprocess", "preprocess")
    done = pipeline.cli("submit", str(photos), "--model", "efficientnet-lite0")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    reached = follow_until(pipeline, pipeline.topics.tensors("efficientnet-lite0"), job_id, kill_at)
    pre.process.send_signal(signal.SIGKILL)
    pre.process.wait()
    assert reached < len(ids), f"trial {trial}: the kill at {kill_at} landed after preprocessing"
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "efficientnet-lite0")
    finish_and_check(pipeline, job_id, ids, tmp_path, timeout_s=240)


@pytest.mark.long
@pytest.mark.parametrize("trial", range(2))
def test_a_submit_killed_mid_way_and_resubmitted_with_its_job_id_doubles_nothing(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path, trial: int
) -> None:
    rows = [{"id": f"{k}-{r['id']}", "text": r["text"]} for k in range(10) for r in example_lines(1200)]
    source = write_jsonl(tmp_path / "big.jsonl", rows)
    job_id = f"job-resubmit-{trial}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "submit", str(source), "--model", "tiny", "--job-id", job_id],
        env=pipeline.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(RNG.uniform(1.0, 3.0))  # validation takes about a second; the kill lands while producing
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    submit(pipeline, source, "--job-id", job_id)
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny")
    finish_and_check(pipeline, job_id, [r["id"] for r in rows], tmp_path, timeout_s=300)


@pytest.mark.long
# Under Kafka 4's consumer group protocol (KIP-848) too: partitions move one by one, assigned by the
# broker, and the dead member's after the broker's group.consumer.session.timeout.ms (6 s on the
# test broker, tests/support/apache_kafka.py).
@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_two_gpu_workers_split_the_partitions_and_one_finishes_when_the_other_dies(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path, group_protocol: str
) -> None:
    # long enough at batch 1 for the second worker's join (a few seconds) to land mid-job; every
    # text its own, or the copies would be reused from the first's results (docs/reuse.md)
    rows = [{"id": f"{k}-{r['id']}", "text": f"{k}: {r['text']}"} for k in range(5) for r in example_lines(1200)]
    pipeline.start("preprocess", "preprocess")
    args = (
        "gpu",
        "--model",
        "tiny",
        "--max-batch-size",
        "1",
        "--max-linger-ms",
        "0",
        "--group-protocol",
        group_protocol,
    )
    first, second = pipeline.start("gpu-a", *args), pipeline.start("gpu-b", *args)

    # small jobs until both members have joined the group and produced results (--no-reuse: the
    # same texts again, each computed, not answered from the first's results)
    def took_part() -> set[str]:
        warm = submit(pipeline, write_jsonl(tmp_path / "warm.jsonl", rows[:200]), "--no-reuse")
        outcome, _ = watch_job(
            pipeline.settings, pipeline.topics, warm, 200, WaitRules(check=pipeline.check_workers, timeout_s=60)
        )
        return {r.batch_id.rsplit("-", 1)[0].rsplit("-", 1)[1] for r in outcome.results.values()}

    workers = wait_until(took_part, 120, "both members taking part", until=lambda took: len(took) >= 2, every_s=0)
    assert workers == {str(first.process.pid), str(second.process.pid)}
    job_id = submit(pipeline, write_jsonl(tmp_path / "in.jsonl", rows), "--no-reuse")
    reached = follow_until(pipeline, pipeline.topics.results, job_id, len(rows) // 5)
    second.process.send_signal(signal.SIGKILL)
    second.process.wait()
    assert reached < len(rows)
    finish_and_check(pipeline, job_id, [r["id"] for r in rows], tmp_path, timeout_s=180)


@pytest.mark.long
def test_exactly_once_mode_writes_each_result_once_across_a_worker_restart(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    rows = example_lines(1200)
    pipeline.start("preprocess", "preprocess")
    args = ("gpu", "--model", "tiny", "--max-batch-size", "4", "--exactly-once", "--instance-id", "eos-a")
    gpu = pipeline.start("gpu", *args)
    job_id = submit(pipeline, write_jsonl(tmp_path / "in.jsonl", rows))
    reached = follow_until(pipeline, pipeline.topics.results, job_id, 300)
    # A clean stop mid-job (Tansu cannot show the crash case). In this mode offsets move only inside
    # the transactions: had they not, the restarted worker would redo the job and double results.
    gpu.process.send_signal(signal.SIGTERM)
    assert gpu.process.wait(30) == 0
    assert reached < len(rows)
    pipeline.start("gpu", *args)
    watch_job(
        pipeline.settings, pipeline.topics, job_id, len(rows), WaitRules(check=pipeline.check_workers, timeout_s=180)
    )
    copies = copies_of(pipeline.settings, pipeline.topics.results)
    assert sorted(copies) == sorted(f"{job_id}/{r['id']}" for r in rows)
    assert set(copies.values()) == {1}


@pytest.mark.long
def test_workers_ride_out_a_short_broker_outage(
    pipeline: RunningPipeline, tiny: TinyModel, test_broker: EmbeddedBroker | ApacheKafka | None, tmp_path: Path
) -> None:
    if test_broker is None:
        pytest.skip("needs a broker this session started, to freeze it")
    rows = example_lines(1200)
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "1", "--max-linger-ms", "0")
    job_id = submit(pipeline, write_jsonl(tmp_path / "in.jsonl", rows))
    follow_until(pipeline, pipeline.topics.results, job_id, 100)
    os.kill(test_broker.pid, signal.SIGSTOP)  # the broker stops answering; its connections stay open
    try:
        time.sleep(5)
        pipeline.check_workers()  # still running, not crashed
    finally:
        os.kill(test_broker.pid, signal.SIGCONT)
    finish_and_check(pipeline, job_id, [r["id"] for r in rows], tmp_path, timeout_s=180)


def test_a_gpu_worker_killed_mid_job_loses_no_record(
    pipeline: RunningPipeline, tiny: TinyModel, reference_ids: Callable[[str], list[int]], tmp_path: Path
) -> None:
    rows = example_lines(1200)
    pipeline.start("preprocess", "preprocess")
    # batches of one record: many commits, so a kill lands between some of them
    gpu = pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "1", "--max-linger-ms", "0")
    job_id = submit(pipeline, write_jsonl(tmp_path / "in.jsonl", rows))

    follow_until(pipeline, pipeline.topics.results, job_id, 100, timeout_s=120)
    gpu.process.send_signal(signal.SIGKILL)
    gpu.process.wait()
    before_restart = read_outcome(pipeline.settings, pipeline.topics, job_id)
    assert 100 <= len(before_restart.results) < len(rows), "the kill must land mid-job"

    pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "16")
    outcome, _ = watch_job(pipeline.settings, pipeline.topics, job_id, len(rows), WaitRules(timeout_s=180))
    assert sorted(outcome.results) == sorted(r["id"] for r in rows)
    assert not outcome.dead
    by_id = {r["id"]: r["text"] for r in rows}
    for rid, result in outcome.results.items():
        expected = tiny.expected(np.array(reference_ids(by_id[rid])))
        np.testing.assert_allclose(result.arrays()["embedding"], expected, atol=1e-6)
