"""`-o -`, a link to the command's own standard output, and --errors through such a link, for
every command that writes a file (results, report, replay), against the real broker: the bytes
reach the pipe the command's stdout is, no file named `-` appears and no link is replaced. The
command's stdout is a pipe of this test, reached through a temporary link: never /dev/stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jobs.launch.kept_cache import ENV_RESULTS_CACHE
from jobs.registry import register
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord, job_record
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import ENV_NAMESPACE, Topics
from model_repository.folders import ENV_MODEL_REPOSITORY
from schemas import DeadLetter, InferenceResult, Job, RawText, Tensor, encode
from tests.support.tiny_model import TinyModel

JOB = "job-streams"


@pytest.fixture
def finished_job(settings: KafkaSettings, topics: Topics) -> None:
    """A job of 4 records: 3 results and a dead letter."""
    ensure_topics(settings, [TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    register(settings, topics, Job(JOB, "tiny", "in.jsonl", "text", 4, 1))
    records = [
        job_record(
            topics.results,
            encode(
                InferenceResult(JOB, f"r{i}", i, "tiny", "1", (Tensor.from_array("e", np.ones(2, np.float32)),), "b", 1)
            ),
            JOB,
            f"r{i}",
        )
        for i in range(3)
    ]
    raw = encode(RawText(JOB, "r3", 3, "tiny", "x", 1))
    letter = DeadLetter.from_error(
        "preprocess", ValueError("bad"), (topics.raw_text, 0, 3, raw), job_id=JOB, record_id="r3", model="tiny"
    )
    records.append(OutRecord(topics.dead_letters, encode(letter), f"{JOB}/r3".encode()))
    produce_all(make_producer(settings), records)


def nearline(settings: KafkaSettings, topics: Topics, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
    command = [sys.executable, "-m", "jobs.cli", *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def stdout_link(tmp_path: Path, name: str) -> Path:
    link = tmp_path / name
    link.symlink_to("/proc/self/fd/1")  # the command's stdout: this test's pipe
    return link


def ids(text: str) -> list[str]:
    return [json.loads(line)["id"] for line in text.splitlines()]


@pytest.mark.usefixtures("finished_job")
def test_results_to_a_dash_or_a_link_to_stdout_reach_the_pipe(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    dash = nearline(settings, topics, tmp_path, "results", JOB, "-o", "-")
    assert dash.returncode == 0, dash.stderr
    assert ids(dash.stdout) == ["r0", "r1", "r2", "r3"]
    link = stdout_link(tmp_path, "out.jsonl")
    linked = nearline(settings, topics, tmp_path, "results", JOB, "-o", str(link))
    assert linked.returncode == 0, linked.stderr
    assert ids(linked.stdout) == ["r0", "r1", "r2", "r3"]
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]  # no file named `-`, no temporary one


@pytest.mark.usefixtures("finished_job")
def test_the_error_file_reaches_a_link_to_stdout_or_a_dash_unless_the_results_go_there_too(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    link = stdout_link(tmp_path, "errors.jsonl")
    done = nearline(settings, topics, tmp_path, "results", JOB, "-o", "out.jsonl", "--errors", str(link))
    assert done.returncode == 0, done.stderr
    assert [(e["id"], e["status"]) for e in map(json.loads, done.stdout.splitlines())] == [("r3", "dead_lettered")]
    assert link.is_symlink() and ids((tmp_path / "out.jsonl").read_text()) == ["r0", "r1", "r2", "r3"]
    dash = nearline(settings, topics, tmp_path, "results", JOB, "-o", "out.jsonl", "--errors", "-")
    assert dash.returncode == 0 and [e["id"] for e in map(json.loads, dash.stdout.splitlines())] == ["r3"]
    both = nearline(settings, topics, tmp_path, "results", JOB, "--errors", "-")
    assert both.returncode == 2 and "standard output, where the results go too" in both.stderr, both.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["errors.jsonl", "out.jsonl"]


@pytest.mark.usefixtures("finished_job")
def test_report_and_replay_write_a_dash_to_stdout_and_through_a_link(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    report = nearline(settings, topics, tmp_path, "report", JOB, "-o", "-")
    assert report.returncode == 0 and report.stdout.lstrip().lower().startswith("<!doctype html"), report.stderr
    link = stdout_link(tmp_path, "report.html")
    linked = nearline(settings, topics, tmp_path, "report", JOB, "-o", str(link))
    assert linked.returncode == 0, linked.stderr
    assert linked.stdout.lstrip().lower().startswith("<!doctype html") and linked.stdout.rstrip().endswith("</html>")
    replay = nearline(settings, topics, tmp_path, "replay", "--topic", "results", "--from-offset", "0", "-o", "-")
    assert replay.returncode == 0, replay.stderr
    assert sorted(line["record"]["record_id"] for line in map(json.loads, replay.stdout.splitlines())) == [
        "r0",
        "r1",
        "r2",
    ]
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


@pytest.mark.process
def test_run_writes_its_results_through_a_link_to_stdout_and_its_errors_to_a_dash(
    tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": f"r{i}", "text": f"text {i}"}) + "\n" for i in range(5)))
    link = stdout_link(tmp_path, "out.jsonl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARLINE_") or k == ENV_RESULTS_CACHE}
    env[ENV_MODEL_REPOSITORY] = str(model_repository)
    command = [sys.executable, "-m", "jobs.cli", "run", str(source), "--model", "tiny", "-o", str(link)]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(ids(done.stdout)) == [f"r{i}" for i in range(5)]
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    errors = [*command[:-1], str(tmp_path / "results.jsonl"), "--errors", "-"]
    with_errors = subprocess.run(errors, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert with_errors.returncode == 0 and with_errors.stdout == "", with_errors.stderr  # no record failed
    assert sorted(ids((tmp_path / "results.jsonl").read_text())) == [f"r{i}" for i in range(5)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl", "results.jsonl"]


@pytest.mark.usefixtures("finished_job")
@pytest.mark.parametrize(
    ("results", "errors"),
    [
        ("link", "/dev/stdout"),  # each written from its own offset: the errors landed over the results
        ("/dev/stdout", "link"),
        ("-", "link"),
        (None, "stdout-file"),  # the file the shell redirected stdout to, named: replaced under it
    ],
)
def test_errors_and_results_never_both_reach_stdout_by_another_name(
    settings: KafkaSettings, topics: Topics, tmp_path: Path, results: str | None, errors: str
) -> None:
    captured = tmp_path / "captured.jsonl"
    named = {"link": str(stdout_link(tmp_path, "out.jsonl")), "stdout-file": str(captured)}
    args = [*(["-o", named.get(results, results)] if results else []), "--errors", named.get(errors, errors)]
    env = {**os.environ, ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
    with captured.open("wb") as stdout:  # a regular file, as `> captured.jsonl` makes it
        command = [sys.executable, "-m", "jobs.cli", "results", JOB, *args]
        done = subprocess.run(command, env=env, cwd=tmp_path, stdout=stdout, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2, (done.stderr, captured.read_text())
    assert "is standard output, where the results go too" in done.stderr
    assert captured.read_bytes() == b""
    # a file named apart from stdout still takes the errors while the results go to stdout
    ok = nearline(settings, topics, tmp_path, "results", JOB, "-o", "-", "--errors", str(tmp_path / "errors.jsonl"))
    assert ok.returncode == 0 and sorted(ids(ok.stdout)) == ["r0", "r1", "r2", "r3"], ok.stderr


@pytest.mark.process
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-o", "in.jsonl"], "in.jsonl is the input: the results would replace it"),
        (["-o", "/dev/stdin"], "/dev/stdin is the input: the results would replace it"),
        (["-o", "out.jsonl", "--errors", "in.jsonl"], "in.jsonl is the input too (standard input)"),
    ],
)
def test_run_of_stdin_never_writes_over_the_file_stdin_is(
    tiny: TinyModel, model_repository: Path, tmp_path: Path, args: list[str], says: str
) -> None:
    source = tmp_path / "in.jsonl"
    text = "".join(json.dumps({"id": f"r{i}", "text": f"text {i}"}) + "\n" for i in range(3))
    source.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARLINE_") or k == ENV_RESULTS_CACHE}
    env[ENV_MODEL_REPOSITORY] = str(model_repository)
    command = [sys.executable, "-m", "jobs.cli", "run", "-", "--model", "tiny", *args]
    with source.open("rb") as stdin:  # `< in.jsonl`
        done = subprocess.run(command, env=env, cwd=tmp_path, stdin=stdin, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert source.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]
