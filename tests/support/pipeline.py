"""Helpers for pipeline tests: real worker processes and the real CLI, on the test broker."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from jobs.launch.local import WorkerProcess, spawn_worker, stop_all
from jobs.launch.runner import WaitRules, watch_job
from jobs.registry import find_job
from kafka_io.clients import Producer, make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import TopicFollower
from kafka_io.records import OutRecord
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import ENV_NAMESPACE, Topics
from kafka_io.transactions import make_transactional_producer
from model_repository.folders import ENV_MODEL_REPOSITORY
from results.outcome import JobOutcome
from schemas import Tensor, TensorRecord, encode
from tests.support.job_checks import assert_exactly_one_result_each, assert_status_is_exact
from tests.support.waiting import wait_until


@dataclass
class RunningPipeline:
    """Worker processes started for one test and the CLI run beside them. Not gpu_consumer's
    Pipeline (the windows in flight inside one GPU worker): this is the whole set of processes."""

    settings: KafkaSettings
    topics: Topics
    repository: Path
    logs: Path
    workers: list[WorkerProcess] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            ENV_BOOTSTRAP: self.settings.bootstrap_servers,
            ENV_NAMESPACE: self.topics.namespace,
            ENV_MODEL_REPOSITORY: str(self.repository),
        }

    def start(self, name: str, *args: str, python: str = sys.executable) -> WorkerProcess:
        worker = spawn_worker(
            name,
            list(args),
            bootstrap_servers=self.settings.bootstrap_servers,
            namespace=self.topics.namespace,
            repository=self.repository,
            log_path=self.logs / f"{name}-{len(self.workers)}.log",
            # scratch (faust's data folder) beside the logs: a worker a test SIGKILLs leaves it
            # in the test's folder, not in /tmp
            extra_env={"TMPDIR": str(self.logs)},
            python=(python,),
        )
        self.workers.append(worker)
        return worker

    def cli(self, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jobs.cli", *args],
            env=self.env(),
            input=stdin.decode() if stdin is not None else None,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def check_workers(self) -> None:
        for w in self.workers:
            if w.process.returncode is None:
                w.check_alive()

    def stop(self) -> None:
        stop_all([w for w in self.workers if w.process.poll() is None])


def start_paced_gpu(pipeline: RunningPipeline, *args: str) -> WorkerProcess:
    """A GPU worker whose engine takes a fixed time a record (tests/support/paced_worker.py, its
    flags in `args`), as one of the pipeline's workers."""
    log_path = pipeline.logs / f"paced-gpu-{len(pipeline.workers)}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tests.support.paced_worker", pipeline.settings.bootstrap_servers]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [*command, pipeline.topics.namespace, str(pipeline.repository), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = WorkerProcess("paced-gpu", process, log_path)
    pipeline.workers.append(worker)
    return worker


def run_embedded(*args: str, repository: Path, timeout_s: float = 800) -> subprocess.CompletedProcess[str]:
    """`nearline run ...` on the embedded default (no cluster named), as README command 1 runs it."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV_BOOTSTRAP, ENV_NAMESPACE)}
    env[ENV_MODEL_REPOSITORY] = str(repository)
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", "run", *args], env=env, capture_output=True, text=True, timeout=timeout_s
    )


def feed_tensors(settings: KafkaSettings, topics: Topics, job_id: str, n: int) -> None:
    """n tiny-model tensor records of job_id straight into tensors.tiny, as the preprocess stage writes them."""
    ensure_topics(settings, [TopicSpec(t) for t in (topics.tensors("tiny"), topics.results, topics.dead_letters)])
    records = []
    for i in range(n):
        ids = Tensor.from_array("input_ids", np.array([101, 2000 + i, 102], dtype=np.int64))
        value = encode(TensorRecord(job_id, f"r{i}", i, "tiny", "1", (ids,), {}, {"submitted": 1}))
        records.append(
            OutRecord(topics.tensors("tiny"), value, f"{job_id}/r{i}".encode(), [("job_id", job_id.encode())])
        )
    produce_all(make_producer(settings), records)


def submit(pipeline: RunningPipeline, path: Path, *extra: str, model: str = "tiny") -> str:
    done = pipeline.cli("submit", str(path), "--model", model, *extra)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def follow_until(pipeline: RunningPipeline, topic: str, job_id: str, at_least: int, timeout_s: float = 120) -> int:
    """Block until `topic` holds at least `at_least` results of the job (results), or records (others:
    a pack counts the records its `records` header says, #41)."""
    seen = JobOutcome(job_id)
    count = 0
    with TopicFollower(pipeline.settings, [topic]) as follower:

        def counted() -> int:
            nonlocal count
            pipeline.check_workers()
            messages = follower.poll(0.05)  # the wait between tries
            if topic == pipeline.topics.results:
                seen.add(messages, pipeline.topics)
                count = len(seen.results)
            else:
                count += sum(m.records for m in messages)
            return count

        what = f"{at_least} records in {topic}"
        return wait_until(counted, timeout_s, what, until=lambda n: n >= at_least, every_s=0)


def finish_and_check(
    pipeline: RunningPipeline,
    job_id: str,
    ids: list[str],
    tmp_path: Path,
    timeout_s: float,
    reused: int | None = None,
) -> None:
    """Wait for the job's latest submission, then: one result per record in `nearline results`, exact
    `status` counts. Waiting on the latest submission matters after a resubmit: results of the
    killed submission's records would count as done before the resubmission's came in, while
    `results` and `status` rightly report the latest submission only."""
    submission = find_job(pipeline.settings, pipeline.topics, job_id).submission
    watch_job(
        pipeline.settings,
        pipeline.topics,
        job_id,
        len(ids),
        WaitRules(check=pipeline.check_workers, timeout_s=timeout_s),
        submission=submission,
    )
    assert_exactly_one_result_each(pipeline, job_id, ids, tmp_path / f"{job_id}.jsonl")
    assert_status_is_exact(pipeline, job_id, len(ids), reused)


def new_producers(settings: KafkaSettings, transactional_id: str | None) -> Callable[[], Producer]:
    """A GPU loop's producer factory, as the worker makes it: transactional where an id is given."""

    def new_producer() -> Producer:
        if transactional_id is not None:
            return make_transactional_producer(settings, transactional_id)
        return make_producer(settings)

    return new_producer
