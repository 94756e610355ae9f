"""`nearline results` through its disk spill, and topic reads that time out on idleness only."""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from jobs.registry import JobStatus, register
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import ConsumedRecord, OutRecord, job_record
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics, partitions_of
from kafka_io.topology import ENV_NAMESPACE, Topics
from results.spill import ENV_MEMORY_BYTES
from schemas import DeadLetter, InferenceResult, Job, RawText, Tensor, encode
from tests.support.columnar_check import assert_columnar_equals_jsonl


def result(topic: str, job_id: str, i: int, version: str = "1") -> OutRecord:
    value = encode(
        InferenceResult(
            job_id, f"r{i}", i, "tiny", version, (Tensor.from_array("embedding", np.full(4, i, np.float32)),), "b", 1
        )
    )
    return job_record(topic, value, job_id, f"r{i}")


def dead(topics: Topics, job_id: str, i: int) -> OutRecord:
    raw = encode(RawText(job_id, f"r{i}", i, "tiny", "x", 1))
    letter = DeadLetter.from_error(
        "preprocess", ValueError("bad"), (topics.raw_text, 0, i, raw), job_id=job_id, record_id=f"r{i}", model="tiny"
    )
    return OutRecord(topics.dead_letters, encode(letter), f"{job_id}/r{i}".encode())


def test_results_come_out_once_each_in_input_order_from_records_spread_out_of_order_over_partitions(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    ensure_topics(settings, [TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    assert len(partitions_of(settings, topics.results)) > 1
    n = 3000
    records = [result(topics.results, "job-a", i) for i in range(n)]
    records += [result(topics.results, "job-a", i) for i in range(0, n, 7)]  # redelivered copies
    records += [result(topics.results, "job-a", i, "2") for i in range(0, n, 11)]  # reprocessed: version 2 wins
    records += [dead(topics, "job-a", i) for i in range(0, n, 13)]  # retried records that later succeeded
    records += [dead(topics, "job-a", n)]  # one record that only failed
    records += [result(topics.results, "job-b", i) for i in range(500)]  # another job's, interleaved
    random.Random(7).shuffle(records)
    produce_all(make_producer(settings), records)

    out = tmp_path / "out.jsonl"
    env = {
        **os.environ,
        ENV_BOOTSTRAP: settings.bootstrap_servers,
        ENV_NAMESPACE: topics.namespace,
        "TMPDIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "results", "job-a", "-o", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == [f"r{i}" for i in range(n + 1)]
    assert [line["model_version"] for line in lines[:n:11]] == ["2"] * len(range(0, n, 11))
    assert all(line["model_version"] == "1" for i, line in enumerate(lines[:n]) if i % 11)
    assert lines[n]["error"]["type"] == "ValueError"
    assert lines[5]["embedding"] == [5.0] * 4
    assert f"{n} results, 1 dead letters" in done.stderr
    assert list(tmp_path.glob("nearline-results-*")) == []  # the spill is removed afterwards

    table = tmp_path / "out.parquet"  # the same spill, written as columns: the same records and values
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "results", "job-a", "-o", str(table)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert_columnar_equals_jsonl(table, out, ["embedding"])


def test_a_topic_read_fails_on_idleness_not_on_the_time_its_reader_spends(
    settings: KafkaSettings, topics: Topics
) -> None:
    ensure_topics(settings, [TopicSpec(topics.results)])
    produce_all(make_producer(settings), [result(topics.results, "job-a", i) for i in range(3000)])
    seen = 0
    # polls return up to 1,000 records: a reader slower in total than the timeout, never idle that long
    for _ in read_topics(settings, [topics.results], 1.0):
        time.sleep(0.001)
        seen += 1
    assert seen == 3000


@pytest.mark.parametrize("header", ["none", "submission", "mixed"])
def test_status_counts_only_the_registry_rows_submission_and_everything_for_rows_from_before_submissions(
    topics: Topics, header: str
) -> None:
    """Results with a submission header are counted by it and their leading fields (the GPU worker
    writes one); those without (written before the header was) by their `submitted` stamp."""

    def stamped(i: int, submitted: int) -> ConsumedRecord:
        value = encode(
            InferenceResult("job-a", f"r{i}", i, "tiny", "1", (), "b", 1, timestamps={"submitted": submitted})
        )
        headers = job_record(topics.results, value, "job-a", f"r{i}", submission=submitted).headers
        if header == "none" or (header == "mixed" and i % 2):
            headers = [("job_id", b"job-a")]
        return ConsumedRecord(topics.results, 0, i, value, headers=tuple(headers))

    messages = [stamped(i, 100) for i in range(3)] + [stamped(i, 200) for i in range(2)]
    again = JobStatus(Job("job-a", "tiny", "in.jsonl", "text", 3, 200, submission=200))
    again.add(messages, topics)
    assert (again.state, again.counts()["inferred"]) == ("running", 2)
    before = JobStatus(Job("job-a", "tiny", "in.jsonl", "text", 3, 150))  # registered without a submission
    before.add(messages, topics)
    assert (before.state, before.counts()["inferred"]) == ("completed", 3)
    unlabelled = stamped(2, 200)  # no job_id header: its own fields say whose it is
    again.add([replace(unlabelled, headers=unlabelled.headers[1:])], topics)
    assert again.counts()["inferred"] == 3


def test_status_folds_a_topic_read_as_it_streams_and_holds_no_record(topics: Topics) -> None:
    """status reads whole topics: each record must be folded before the next is read (it used to
    collect every result before counting, 2.3 GB at a million records)."""
    status = JobStatus(Job("job-s", "tiny", "in.jsonl", "text", 5, 100))
    tensors = ConsumedRecord(topics.tensors("tiny"), 0, 0, b"", b"job-s/r0", (("job_id", b"job-s"),))

    def stream() -> Iterator[ConsumedRecord]:
        yield tensors
        for i in range(5):
            value = encode(InferenceResult("job-s", f"r{i}", i, "tiny", "1", (), "b", 1))
            yield ConsumedRecord(topics.results, 0, i, value, headers=(("job_id", b"job-s"),))
            assert status.done == i + 1  # folded before the reader asks for the next record

    status.add(stream(), topics)
    assert (status.state, status.counts()["preprocessed"], status.done) == ("completed", 1, 5)


def test_nearline_runs_wait_folds_the_job_into_the_disk_spill_once_per_record(
    settings: KafkaSettings, topics: Topics
) -> None:
    """`nearline run` follows its job into a ResultSpill, not memory: the same counts, batches and
    input order as the in-memory outcome, with redelivered copies dropped."""
    from jobs.launch.runner import WaitRules, follow_job, summarize
    from results.spill import ResultSpill

    ensure_topics(settings, [TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    n = 200

    def batched(i: int) -> OutRecord:
        value = encode(
            InferenceResult(
                "job-c", f"r{i}", i, "tiny", "1", (Tensor.from_array("e", np.full(2, i, np.float32)),), f"w.{i // 8}", 8
            )
        )
        return job_record(topics.results, value, "job-c", f"r{i}")

    records = [batched(i) for i in range(n)] + [batched(i) for i in range(0, n, 9)]  # redelivered copies
    records += [dead(topics, "job-c", n), result(topics.results, "job-d", 0)]  # one failure; another job's
    random.Random(3).shuffle(records)
    produce_all(make_producer(settings), records)
    with ResultSpill("job-c") as spill:
        follow_job(settings, topics, spill, n + 1, WaitRules(timeout_s=60))
        assert (spill.done, spill.failed, spill.duplicates) == (n + 1, 1, len(range(0, n, 9)))
        summary = summarize(spill, 1.0)
        assert (summary.records, summary.dead_lettered, summary.batches, summary.mean_batch_size) == (n, 1, n // 8, 8)
        assert [item.record_id for item in spill.ordered()] == [f"r{i}" for i in range(n + 1)]


def test_a_wait_that_keeps_no_results_counts_every_record_and_keeps_its_dead_letters(
    settings: KafkaSettings, topics: Topics
) -> None:
    """`submit --wait` reports counts and dead letters only: it folds the job without holding its results."""
    from jobs.launch.runner import WaitRules, watch_job

    ensure_topics(settings, [TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    records = [result(topics.results, "job-w", i) for i in range(5)] + [result(topics.results, "job-w", 0)]
    produce_all(make_producer(settings), [*records, dead(topics, "job-w", 5)])
    outcome, _ = watch_job(settings, topics, "job-w", 6, WaitRules(timeout_s=60), keep_results=False)
    assert (outcome.done, outcome.inferred, outcome.duplicates, list(outcome.dead)) == (6, 5, 1, ["r5"])
    assert outcome.results == {}


def test_results_of_an_unknown_job_are_an_error_and_of_an_unfinished_one_say_so(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    ensure_topics(settings, [TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    register(settings, topics, Job("job-half", "tiny", "in.jsonl", "text", 10, 1))
    produce_all(make_producer(settings), [result(topics.results, "job-half", i) for i in range(4)])
    env = {**os.environ, ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}

    def results(job_id: str, out: Path) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "jobs.cli", "results", job_id, "-o", str(out)]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    unknown = results("job-nope", tmp_path / "nope.jsonl")
    assert unknown.returncode == 1 and "no job job-nope in" in unknown.stderr, unknown.stderr
    assert "Traceback" not in unknown.stderr and not (tmp_path / "nope.jsonl").exists()
    half = results("job-half", tmp_path / "half.jsonl")
    assert half.returncode == 1, half.stderr
    assert "error: job job-half is not complete: 4 of its 10 records" in half.stderr
    assert [json.loads(line)["id"] for line in (tmp_path / "half.jsonl").read_text().splitlines()] == [
        f"r{i}" for i in range(4)
    ]


def test_a_spill_that_runs_out_of_room_is_an_error_in_a_line_not_a_traceback(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    ensure_topics(settings, [TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    produce_all(make_producer(settings), [result(topics.results, "job-big", i) for i in range(2000)])
    env = {**os.environ, ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
    env["TMPDIR"] = str(tmp_path)
    env[ENV_MEMORY_BYTES] = "0"  # a job this small is held in memory otherwise: spill it

    def small_files() -> None:  # files of at most 64 KiB, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "results", "job-big", "-o", str(tmp_path / "out.jsonl")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=small_files,
    )
    assert done.returncode == 1, done.stderr
    assert f"error: the results spill under {tmp_path} failed" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out.jsonl").exists()
