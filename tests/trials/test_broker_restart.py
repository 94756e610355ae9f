"""Broker failures: a GPU worker keeps working across a restart of the embedded broker, which
loses all its data, and a submit cut off by a broker that died says what was stored."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.job_input import JobInput
from jobs.launch.local import start_pipeline_workers, stop_all
from jobs.launch.runner import WaitRules, watch_job
from jobs.submit import submit
from kafka_io.broker import EmbeddedBroker
from kafka_io.offsets import end_offsets
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topology import Topics
from tests.support.pipeline import feed_tensors
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until


@pytest.mark.long
@pytest.mark.timeout(400)
def test_both_workers_recover_from_a_broker_restart_that_lost_everything(
    tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("restart")
    pre, gpu = start_pipeline_workers(
        "tiny",
        bootstrap_servers=broker.bootstrap_servers,
        namespace=topics.namespace,
        repository=model_repository,
        logs=tmp_path,
    )

    def check() -> None:
        gpu.check_alive()
        pre.check_alive()

    try:
        feed_tensors(settings, topics, "job-before", 10)
        before, _ = watch_job(settings, topics, "job-before", 10, WaitRules(check=check, timeout_s=120))
        assert len(before.results) == 10

        broker.stop()
        broker = EmbeddedBroker.start(tmp_path / "broker2.log", port=broker.port)  # empty: no topics, no groups
        feed_tensors(settings, topics, "job-after", 10)
        after, _ = watch_job(settings, topics, "job-after", 10, WaitRules(check=check, timeout_s=240))
        assert sorted(after.results) == [f"r{i}" for i in range(10)]
        # #30 15d: the first job after the restart waited ~30 s for the GPU worker's idempotent
        # producer, which the new broker no longer knew, to time out; the worker now sees that
        # the broker answers while it confirms nothing and recreates the producer after 5 s, or
        # at once when librdkafka turns it fatal first (the new broker gave its producer id to
        # another producer: OUT_OF_ORDER_SEQUENCE_NUMBER; which comes first is librdkafka's timing)
        gpu_log = "".join(p.read_text() for p in tmp_path.glob("gpu*.log"))
        recreated = ("deliveries unconfirmed for 5 s while the broker answers", "producer failed: KafkaError{FATAL")
        assert any(line in gpu_log for line in recreated), gpu_log
        assert "deliveries unconfirmed after 30 s" not in gpu_log, gpu_log
        # and a text job through both stages
        texts = tmp_path / "texts.txt"
        texts.write_text("".join(f"sentence number {i}\n" for i in range(25)))
        report = submit(settings, topics, JobInput(texts, "text"), "tiny")
        text_job, _ = watch_job(settings, topics, report.job_id, 25, WaitRules(check=check, timeout_s=240))
        assert len(text_job.results) == 25
    finally:
        stop_all([gpu, pre])
        broker.stop()


def test_a_submit_cut_off_by_the_broker_says_how_much_was_stored_and_exits_3(tmp_path: Path) -> None:
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    source = tmp_path / "in.txt"
    source.write_text("".join(f"line {i} of a job too big to submit in an instant\n" for i in range(200_000)))
    env = {
        **os.environ,
        ENV_BOOTSTRAP: broker.bootstrap_servers,
        # librdkafka's own delivery timeout, as a deployment may set it: queued records fail after
        # 3 s instead of 5 minutes
        "NEARLINE_KAFKA_MESSAGE_TIMEOUT_MS": "3000",
    }
    submit_cmd = [sys.executable, "-m", "jobs.cli", "submit", str(source), "--model", "tiny", "--job-id", "cut"]
    started = time.monotonic()
    process = subprocess.Popen(submit_cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        settings = KafkaSettings(broker.bootstrap_servers)
        wait_until(  # mid-submit: some records are stored, most are not
            lambda: sum(end_offsets(settings, Topics().raw_text).values()),
            60,
            "1,000 records stored",
            until=lambda stored: stored >= 1000,
        )
        broker.kill()
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
        broker.stop()
    assert process.returncode == 3, err
    assert "error: job cut: Kafka at" in err and "stopped taking records mid-submit" in err
    stored = int(err.split("It confirmed ")[1].split(" of 200000 records;")[0])
    assert 1000 <= stored < 200_000
    assert "the job was not registered" in err and "--job-id cut" in err
    assert "Traceback" not in err
    assert out == ""  # no job id printed: there is no job
    assert time.monotonic() - started < 60  # not librdkafka's 5-minute delivery timeout
