"""Long broker outages (a minute, where tests/trials/test_broker_restart.py restarts at once): what
runs for months waits them out and resumes, never exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from jobs.registry import register
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord, job_record
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics, jobs_topic
from kafka_io.topology import ENV_NAMESPACE, Topics
from results.spill import ENV_MEMORY_BYTES
from schemas import InferenceResult, Job, Tensor, encode
from tests.support.inputs import example_lines, write_jsonl
from tests.support.job_checks import assert_exactly_one_result_each, assert_status_is_exact
from tests.support.pipeline import RunningPipeline, follow_until, submit
from tests.support.scheduling import Clock, LoneScheduler
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until

OUTAGE_S = 60


@dataclass
class OwnBroker:
    """Worker processes on a broker of the test's own, which it freezes or kills and starts again
    (the session's broker must stay up for the other tests)."""

    broker: EmbeddedBroker
    pipeline: RunningPipeline

    def restart_empty(self, log_path: Path) -> None:
        """A new, empty broker on the same port, as after a restart that lost everything."""
        self.broker = EmbeddedBroker.start(log_path, port=self.broker.port)


@pytest.fixture
def own(tiny: TinyModel, model_repository: Path, tmp_path: Path) -> Iterator[OwnBroker]:
    """Workers of the tiny model on a broker of the test's own, all stopped at the end."""
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("outage")
    own = OwnBroker(broker, RunningPipeline(settings, topics, model_repository, tmp_path / "logs"))
    try:
        yield own
    finally:
        own.pipeline.stop()
        own.broker.kill()


@pytest.mark.long
@pytest.mark.timeout(300)
def test_a_running_scheduler_waits_out_a_minute_without_a_broker_and_resumes(
    lone: LoneScheduler, clock: Clock, text_input: Path
) -> None:
    lone.broker.kill()  # connections refused for the whole minute
    down = time.monotonic()
    while time.monotonic() - down < OUTAGE_S:
        assert lone.alive(), lone.events  # the old scheduler died here, ~20 s in
        time.sleep(1)
    lone.restart_broker()
    lone.submits_the_next_tick(text_input, clock, time.monotonic() + 60)
    assert not lone.alive()
    assert any(e.startswith("scheduler: Kafka unavailable, retrying every 5 s") for e in lone.events), lone.events
    assert any(e.startswith("scheduler: Kafka answers again after") for e in lone.events), lone.events


def embedding(topic: str, job_id: str, i: int) -> OutRecord:
    """A result as big as a MiniLM one (384 floats)."""
    tensor = Tensor.from_array("embedding", np.full(384, i, np.float32))
    value = encode(InferenceResult(job_id, f"r{i}", i, "tiny", "1", (tensor,), "b", 1))
    return job_record(topic, value, job_id, f"r{i}")


def test_results_says_at_once_that_the_broker_went_away_mid_read(tmp_path: Path) -> None:
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("gone")
    n = 40_000  # 60 MB: a read of seconds, so the kill lands inside it
    try:
        ensure_topics(settings, [TopicSpec(topics.results), TopicSpec(topics.dead_letters), jobs_topic(topics)])
        register(settings, topics, Job("big", "tiny", "in.txt", "text", n, 0))
        produce_all(make_producer(settings), (embedding(topics.results, "big", i) for i in range(n)), timeout_s=120)
        spills = tmp_path / "tmp"
        spills.mkdir()
        env = {**os.environ, ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
        env["TMPDIR"] = str(spills)
        # librdkafka prefetches up to 64 MB: the whole topic, fetched before the spill shows rows, and
        # a reader with nothing left to fetch rightly finishes. 16 MB keeps most of it at the broker.
        env["NEARLINE_KAFKA_QUEUED_MAX_MESSAGES_KBYTES"] = str(16 * 1024)
        # Results go to the on-disk spill from the first row (a job this size is otherwise held in
        # memory, which leaves nothing here to see): its size is how the test sees the read going.
        env[ENV_MEMORY_BYTES] = "0"
        command = [sys.executable, "-m", "jobs.cli", "results", "big", "-o", str(tmp_path / "out.jsonl")]
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # the spill holds rows (its empty table alone is a few KB): the command is reading the results
            def reading() -> None:
                assert process.poll() is None, process.communicate()

            wait_until(
                lambda: any(p.stat().st_size > 200_000 for p in spills.glob("nearline-results-*/spill.sqlite")),
                60,
                "the results command's spill holding rows",
                every_s=0.02,
                meanwhile=reading,
            )
            broker.kill()
            killed = time.monotonic()
            _, err = process.communicate(timeout=120)
            waited = time.monotonic() - killed
        finally:
            process.kill()
    finally:
        broker.kill()
    assert process.returncode == 3, err
    assert f"Kafka at {settings.bootstrap_servers}" in err and "refused the connection" in err, err
    assert "Traceback" not in err
    assert waited < 30, waited  # it was 64 s: the whole idle timeout


@pytest.mark.long
@pytest.mark.timeout(300)
def test_both_workers_and_submit_wait_ride_out_a_minute_of_a_frozen_broker(own: OwnBroker, tmp_path: Path) -> None:
    pipeline = own.pipeline
    rows = example_lines(1200)
    submit_out, submit_err = (tmp_path / "submit.out").open("w"), (tmp_path / "submit.err").open("w")
    try:
        pipeline.start("preprocess", "preprocess")
        # one record per executed batch: the job outlasts the start of the outage
        pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "1", "--max-linger-ms", "0")
        command = [sys.executable, "-m", "jobs.cli", "submit", str(write_jsonl(tmp_path / "in.jsonl", rows))]
        waiting = subprocess.Popen(
            [*command, "--model", "tiny", "--wait"], env=pipeline.env(), stdout=submit_out, stderr=submit_err, text=True
        )

        def submitting() -> None:
            assert waiting.poll() is None, (tmp_path / "submit.err").read_text()

        job_id = wait_until(  # printed once all is stored
            lambda: (tmp_path / "submit.out").read_text().strip(),
            120,
            "submit's job id",
            every_s=0.1,
            meanwhile=submitting,
        )
        follow_until(pipeline, pipeline.topics.results, job_id, 100)
        os.kill(own.broker.pid, signal.SIGSTOP)  # no answers, connections kept: a network outage, state intact
        try:
            frozen = time.monotonic()
            while time.monotonic() - frozen < OUTAGE_S:
                pipeline.check_workers()
                assert waiting.poll() is None, (tmp_path / "submit.err").read_text()
                time.sleep(1)
        finally:
            os.kill(own.broker.pid, signal.SIGCONT)
        assert waiting.wait(120) == 0, (tmp_path / "submit.err").read_text()
        pipeline.check_workers()
        assert_exactly_one_result_each(pipeline, job_id, [r["id"] for r in rows], tmp_path / "out.jsonl")
        assert_status_is_exact(pipeline, job_id, len(rows))  # nothing dead-lettered, nothing counted twice
    finally:
        submit_out.close()
        submit_err.close()


@pytest.mark.long
@pytest.mark.timeout(300)
def test_a_preprocess_worker_logs_a_broker_outage_in_a_few_lines_and_resumes(own: OwnBroker, tmp_path: Path) -> None:
    # #30 C8: a 2-minute outage wrote ~8,300 lines (a 30 s one 2,232), aiokafka's every reconnect at ERROR
    pipeline = own.pipeline
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"sentence number {i}\n" for i in range(20)))
    worker = pipeline.start("preprocess", "preprocess")
    follow_until(pipeline, pipeline.topics.tensors("tiny"), submit(pipeline, texts), 20)  # it consumes
    own.broker.kill()  # connections refused throughout
    down = time.monotonic()
    while time.monotonic() - down < 30:
        pipeline.check_workers()
        time.sleep(1)
    own.restart_empty(tmp_path / "broker2.log")
    # the new broker holds nothing: every tensor record in it is the new job's
    follow_until(pipeline, pipeline.topics.tensors("tiny"), submit(pipeline, texts), 20)
    # said once the libraries stopped failing for a few seconds: it may come after the job
    wait_until(
        worker.log_path.read_text,
        60,
        "'answers again after' in the worker's log",
        until=lambda log: "answers again after" in log,
        every_s=0.5,
        meanwhile=pipeline.check_workers,
    )
    pipeline.stop()  # the whole log, its shutdown lines counted too
    log = worker.log_path.read_text()
    assert len(log.splitlines()) < 50, log
    assert f"Kafka at {own.broker.bootstrap_servers} unreachable, waiting for it; records are kept" in log, log


@pytest.mark.long
@pytest.mark.timeout(400)
def test_workers_that_served_a_job_ride_out_a_minute_of_refused_connections_and_stop_cleanly(
    own: OwnBroker, tmp_path: Path
) -> None:
    # #40 2: ~10 s into the outage the GPU worker aborted (CallState_get: Assertion `cs != NULL'),
    # its group session's timeout having run a metadata request inside the consumer's callback; and
    # a SIGTERMed preprocess worker hung until its SIGKILL, waiting on a commit nobody answered
    pipeline = own.pipeline
    workers = [pipeline.start("preprocess", "preprocess"), pipeline.start("gpu", "gpu", "--model", "tiny")]
    rows = example_lines(3)
    done = pipeline.cli("submit", str(write_jsonl(tmp_path / "in.jsonl", rows)), "--model", "tiny", "--wait")
    assert done.returncode == 0, done.stderr
    own.broker.kill()  # connections refused for the whole minute
    down = time.monotonic()
    while time.monotonic() - down < OUTAGE_S:
        pipeline.check_workers()
        time.sleep(1)
    # the broker comes back empty (Tansu keeps nothing): both workers take a new job through
    own.restart_empty(tmp_path / "broker2.log")
    rows_after = [{**row, "id": f"after-{row['id']}"} for row in example_lines(5)]
    done = pipeline.cli("submit", str(write_jsonl(tmp_path / "after.jsonl", rows_after)), "--model", "tiny", "--wait")
    assert done.returncode == 0, done.stderr
    assert_exactly_one_result_each(pipeline, done.stdout.strip(), [r["id"] for r in rows_after], tmp_path / "out.jsonl")
    pipeline.check_workers()
    # and a SIGTERM in a second outage, the kind that had them hang
    own.broker.kill()
    down = time.monotonic()
    while time.monotonic() - down < 15:  # past the GPU worker's group session (6 s): the abort came here
        pipeline.check_workers()
        time.sleep(1)
    for worker in workers:
        assert worker.stop() == 0, worker.log_tail(40)  # stop(): SIGTERM, then SIGKILL after 15 s
        log = worker.log_path.read_text()
        assert "Traceback" not in log and "Fatal Python error" not in log, log
