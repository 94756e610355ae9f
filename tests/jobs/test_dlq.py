"""nearline dlq list|show|replay against the real broker and real workers."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

from jobs.launch.runner import watch_job
from jobs.results import read_outcome
from kafka_io.reading import read_topics
from schemas import DeadLetter, RawText, decode
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import TinyModel, build_tiny_model


def test_dead_letters_are_listed_shown_and_replayed_after_a_fix(
    pipeline: RunningPipeline, tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    model = f"late{uuid.uuid4().hex[:6]}"  # not in the repository yet: every record is dead-lettered
    rows = example_lines(12)
    done = pipeline.cli(
        "submit", str(write_jsonl(tmp_path / "in.jsonl", rows)), "--model", model, "--job-id", "job-dlq"
    )
    assert done.returncode == 0, done.stderr
    pipeline.start("preprocess", "preprocess")
    first, _ = watch_job(
        pipeline.settings, pipeline.topics, "job-dlq", len(rows), check=pipeline.check_workers, timeout_s=120
    )
    assert len(first.dead) == len(rows) and not first.results

    listed = pipeline.cli("dlq", "list", "--job", "job-dlq", "--json")
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert sorted(e["record_id"] for e in entries) == sorted(r["id"] for r in rows)
    assert {(e["stage"], e["error_type"]) for e in entries} == {("preprocess", "ModelNotFoundError")}
    assert all(e["source"].startswith(pipeline.topics.raw_text + "/") for e in entries)

    shown = pipeline.cli("dlq", "show", entries[0]["id"])
    detail = json.loads(shown.stdout)
    raw = decode(base64.b64decode(detail["payload_base64"]), RawText)
    assert (raw.job_id, raw.record_id, raw.model) == ("job-dlq", entries[0]["record_id"], model)
    assert pipeline.cli("dlq", "show", "3:999999").returncode == 1

    build_tiny_model(model_repository, name=model)  # the fix: the model now exists
    pipeline.start("gpu", "gpu", "--model", model)
    replayed = pipeline.cli("dlq", "replay", "--job", "job-dlq")
    assert replayed.returncode == 0, replayed.stderr
    assert f"replayed {len(rows)} dead letters" in replayed.stderr
    # a dead letter already counts as done for watch_job: wait for the results themselves
    deadline = time.monotonic() + 120
    after = read_outcome(pipeline.settings, pipeline.topics, "job-dlq")
    while len(after.results) < len(rows) and time.monotonic() < deadline:
        pipeline.check_workers()
        time.sleep(0.5)
        after = read_outcome(pipeline.settings, pipeline.topics, "job-dlq")
    assert sorted(after.results) == sorted(r["id"] for r in rows)
    assert not after.dead  # results supersede the dead letters in every reader


def dead_letters_of(pipeline: RunningPipeline, job_id: str, n: int) -> list[DeadLetter]:
    """The job's dead letters once there are n of them (a replay's new ones come from a worker)."""
    deadline = time.monotonic() + 120
    while True:
        found = [
            letter
            for msg in read_topics(pipeline.settings, [pipeline.topics.dead_letters])
            if (letter := decode(msg.value, DeadLetter)).job_id == job_id
        ]
        if len(found) >= n or time.monotonic() > deadline:
            assert len(found) == n, f"{len(found)} dead letters of {job_id}, not {n}"
            return found
        pipeline.check_workers()
        time.sleep(0.5)


def test_each_replay_takes_the_latest_dead_letter_of_each_record_without_a_result_once(
    pipeline: RunningPipeline, tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    """Every replay re-injected every earlier copy too: "replayed 3", then 6, then 12."""
    model = f"late{uuid.uuid4().hex[:6]}"  # not in the repository yet: every record is dead-lettered
    rows = example_lines(3)
    job = f"job-dlq-{uuid.uuid4().hex[:6]}"
    done = pipeline.cli("submit", str(write_jsonl(tmp_path / "in.jsonl", rows)), "--model", model, "--job-id", job)
    assert done.returncode == 0, done.stderr
    pipeline.start("preprocess", "preprocess")
    dead_letters_of(pipeline, job, 3)
    first_ids = [e["id"] for e in json.loads(pipeline.cli("dlq", "list", "--job", job, "--json").stdout)]

    for replays in (1, 2):  # the model is still missing: each replayed record fails again
        replayed = pipeline.cli("dlq", "replay", "--job", job)
        assert replayed.returncode == 0, replayed.stderr
        assert "replayed 3 dead letters" in replayed.stderr, replayed.stderr
        dead_letters_of(pipeline, job, 3 * (replays + 1))
        listed = json.loads(pipeline.cli("dlq", "list", "--job", job, "--json").stdout)
        assert sorted(e["record_id"] for e in listed) == sorted(r["id"] for r in rows)  # one per record
        assert {e["status"] for e in listed} == {"outstanding"} and not set(first_ids) & {e["id"] for e in listed}
    every = pipeline.cli("dlq", "list", "--job", job, "--all", "--json")
    statuses = [e["status"] for e in json.loads(every.stdout)]
    assert sorted(statuses) == ["outstanding"] * 3 + ["superseded"] * 6
    assert "9 dead letters, 3 outstanding" in every.stderr
    named = pipeline.cli("dlq", "replay", first_ids[0])  # an old copy, named: its record's latest is the one
    assert "replayed 0 dead letters" in named.stderr and f"not replayed: {first_ids[0]}: its record failed again" in (
        named.stderr
    )
    assert pipeline.cli("dlq", "replay", "3:999999").returncode == 1

    build_tiny_model(model_repository, name=model)  # the fix
    pipeline.start("gpu", "gpu", "--model", model)
    replayed = pipeline.cli("dlq", "replay", "--job", job)
    assert "replayed 3 dead letters" in replayed.stderr, replayed.stderr
    deadline = time.monotonic() + 120
    after = read_outcome(pipeline.settings, pipeline.topics, job)
    while len(after.results) < len(rows) and time.monotonic() < deadline:
        pipeline.check_workers()
        time.sleep(0.5)
        after = read_outcome(pipeline.settings, pipeline.topics, job)
    assert sorted(after.results) == sorted(r["id"] for r in rows)
    # every record has a result now: nothing is outstanding, and nothing is replayed again
    assert "replayed 0 dead letters" in pipeline.cli("dlq", "replay", "--job", job).stderr
    assert json.loads(pipeline.cli("dlq", "list", "--job", job, "--json").stdout) == []
    statuses = [e["status"] for e in json.loads(pipeline.cli("dlq", "list", "--job", job, "--all", "--json").stdout)]
    assert statuses == ["resolved"] * 9
