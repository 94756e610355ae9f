"""nearline dlq list|show|replay against the real broker and real workers."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from jobs.dlq import letters
from jobs.dlq_lock import LEASE_S, LOCK_KEY, replay_turn
from jobs.launch.runner import WaitRules, watch_job
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord
from results.outcome import read_outcome
from schemas import DeadLetter, RawText, decode
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline
from tests.support.records import record_keys_in
from tests.support.tiny_model import TinyModel, build_tiny_model
from tests.support.waiting import wait_until


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
        pipeline.settings, pipeline.topics, "job-dlq", len(rows), WaitRules(check=pipeline.check_workers, timeout_s=120)
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
    after = wait_until(
        lambda: read_outcome(pipeline.settings, pipeline.topics, "job-dlq"),
        120,
        f"{len(rows)} results of job-dlq",
        until=lambda outcome: len(outcome.results) >= len(rows),
        every_s=0.5,
        meanwhile=pipeline.check_workers,
    )
    assert sorted(after.results) == sorted(r["id"] for r in rows)
    assert not after.dead  # results supersede the dead letters in every reader


def dead_letters_of(pipeline: RunningPipeline, job_id: str, n: int) -> list[DeadLetter]:
    """The job's dead letters once there are n of them (a replay's new ones come from a worker)."""

    def of_the_job() -> list[DeadLetter]:
        # jobs.dlq.letters: the topic also holds the marks of replays, which are no dead letters
        return [e.letter for e in letters(pipeline.settings, pipeline.topics) if e.letter.job_id == job_id]

    found = wait_until(
        of_the_job,
        120,
        f"{n} dead letters of {job_id}",
        until=lambda seen: len(seen) >= n,
        every_s=0.5,
        meanwhile=pipeline.check_workers,
    )
    assert len(found) == n, f"{len(found)} dead letters of {job_id}, not {n}"
    return found


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
    after = wait_until(
        lambda: read_outcome(pipeline.settings, pipeline.topics, job),
        120,
        f"{len(rows)} results of {job}",
        until=lambda outcome: len(outcome.results) >= len(rows),
        every_s=0.5,
        meanwhile=pipeline.check_workers,
    )
    assert sorted(after.results) == sorted(r["id"] for r in rows)
    # every record has a result now: nothing is outstanding, and nothing is replayed again
    assert "replayed 0 dead letters" in pipeline.cli("dlq", "replay", "--job", job).stderr
    assert json.loads(pipeline.cli("dlq", "list", "--job", job, "--json").stdout) == []
    statuses = [e["status"] for e in json.loads(pipeline.cli("dlq", "list", "--job", job, "--all", "--json").stdout)]
    assert statuses == ["resolved"] * 9


def test_a_replay_in_flight_is_not_replayed_again_unless_forced(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    """A second quick `dlq replay` sent again every record the first had put back (#30 review 5)."""
    model = f"gone{uuid.uuid4().hex[:6]}"  # not in the repository: every record is dead-lettered
    rows = example_lines(3)
    job = f"job-dlq-{uuid.uuid4().hex[:6]}"
    done = pipeline.cli("submit", str(write_jsonl(tmp_path / "in.jsonl", rows)), "--model", model, "--job-id", job)
    assert done.returncode == 0, done.stderr
    pipeline.start("preprocess", "preprocess")
    dead_letters_of(pipeline, job, 3)
    pipeline.stop()  # nothing takes the replayed records: they stay in flight
    first = pipeline.cli("dlq", "replay", "--job", job)
    assert "replayed 3 dead letters" in first.stderr, first.stderr
    again = pipeline.cli("dlq", "replay", "--job", job)
    assert again.returncode == 0, again.stderr
    assert "replayed 0 dead letters" in again.stderr, again.stderr
    assert "not replayed: 3 dead letters an earlier replay put back" in again.stderr and "--force" in again.stderr
    listed = json.loads(pipeline.cli("dlq", "list", "--job", job, "--all", "--json").stdout)
    assert [e["status"] for e in listed] == ["replayed"] * 3
    named = pipeline.cli("dlq", "replay", listed[0]["id"])
    assert f"not replayed: {listed[0]['id']}: replayed already" in named.stderr, named.stderr
    forced = pipeline.cli("dlq", "replay", "--job", job, "--force")
    assert "replayed 3 dead letters" in forced.stderr, forced.stderr
    # taken at last: each copy fails again (3 + 3 forced), and the new latest letters are outstanding
    pipeline.start("preprocess", "preprocess")
    dead_letters_of(pipeline, job, 9)
    every = pipeline.cli("dlq", "list", "--job", job, "--all", "--json").stdout
    order = [(e["failed_at_us"], e["id"]) for e in json.loads(every)]
    assert order == sorted(order, key=lambda o: (o[0], *map(int, o[1].split(":"))))  # oldest first
    assert pipeline.cli("dlq", "list", "--job", job, "--all", "--json").stdout == every  # and stable
    listed = json.loads(pipeline.cli("dlq", "list", "--job", job, "--json").stdout)
    assert sorted(e["record_id"] for e in listed) == sorted(r["id"] for r in rows)
    assert "replayed 3 dead letters" in pipeline.cli("dlq", "replay", "--job", job).stderr


def test_dlq_of_a_job_nobody_submitted_says_so(pipeline: RunningPipeline, tmp_path: Path) -> None:
    """`dlq list --job nosuch` said "0 dead letters", as if the job existed and had none."""
    for args in (("list", "--job", "nosuch"), ("replay", "--job", "nosuch")):
        done = pipeline.cli("dlq", *args)
        assert done.returncode == 1, (args, done.stderr)
        assert f"error: no job nosuch in {pipeline.topics.jobs} and no dead letter of it" in done.stderr
        assert not done.stdout and "Traceback" not in done.stderr
    job = f"job-dlq-{uuid.uuid4().hex[:6]}"
    done = pipeline.cli(
        "submit", str(write_jsonl(tmp_path / "in.jsonl", example_lines(2))), "--model", "tiny", "--job-id", job
    )
    assert done.returncode == 0, done.stderr
    listed = pipeline.cli("dlq", "list", "--job", job)  # a job that exists and has none: 0, exit 0
    assert listed.returncode == 0 and "0 dead letters" in listed.stderr, listed.stderr


def _dead_job(pipeline: RunningPipeline, tmp_path: Path, n: int) -> str:
    """A job of n records whose model is missing, every record dead-lettered, and no worker left
    to take a replayed record: what a replay puts back stays in raw.text, to be counted."""
    model = f"gone{uuid.uuid4().hex[:6]}"
    job = f"job-dlq-{uuid.uuid4().hex[:6]}"
    rows = example_lines(n)
    done = pipeline.cli("submit", str(write_jsonl(tmp_path / f"{job}.jsonl", rows)), "--model", model, "--job-id", job)
    assert done.returncode == 0, done.stderr
    pipeline.start("preprocess", "preprocess")
    dead_letters_of(pipeline, job, n)
    pipeline.stop()
    return job


def _raw_keys(pipeline: RunningPipeline) -> list[str]:
    return record_keys_in(read_topics(pipeline.settings, [pipeline.topics.raw_text]))


def test_two_replays_started_together_replay_each_letter_once(pipeline: RunningPipeline, tmp_path: Path) -> None:
    """Two `dlq replay --job J` started together both replayed every letter: 100 records into
    raw.text for 50 (#40, 11). One replays them; the other waits for it and replays none."""
    job = _dead_job(pipeline, tmp_path, 50)
    before = _raw_keys(pipeline)
    assert len(before) == 50
    command = [sys.executable, "-m", "jobs.cli", "dlq", "replay", "--job", job]
    runs = [subprocess.Popen(command, env=pipeline.env(), stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errs = [run.communicate(timeout=120)[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], errs
    counts = sorted(int(re.findall(r"replayed (\d+) dead letters", err)[-1]) for err in errs)
    assert counts == [0, 50], errs
    late = next(err for err in errs if "replayed 0 dead letters" in err)
    assert "not replayed: 50 dead letters an earlier replay put back" in late, late
    after = _raw_keys(pipeline)
    assert sorted(after) == sorted(before * 2)  # each record once more, no more


def test_a_replay_waits_for_one_that_holds_the_topic_and_refuses_after_wait(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    job = _dead_job(pipeline, tmp_path, 4)
    with replay_turn(pipeline.settings, pipeline.topics, wait_s=0):  # a replay in progress, in this process
        refused = pipeline.cli("dlq", "replay", "--job", job, "--wait-s", "1")
    assert refused.returncode == 1, refused.stderr
    assert f"started by {socket.gethostname()} pid {os.getpid()}" in refused.stderr, refused.stderr
    assert "still holds" in refused.stderr and "nothing was replayed" in refused.stderr
    assert "waiting for the dlq replay" in refused.stderr and "Traceback" not in refused.stderr
    assert len(_raw_keys(pipeline)) == 4
    # a run killed while it held the claim never releases it: its claim lapses
    stale = {"event": "claim", "run": "killed", "who": "gone", "at_ms": int((time.time() - LEASE_S - 5) * 1000)}
    produce_all(
        make_producer(pipeline.settings),
        [OutRecord(pipeline.topics.dlq_replays, json.dumps(stale).encode(), key=LOCK_KEY)],
    )
    done = pipeline.cli("dlq", "replay", "--job", job, "--wait-s", "0")
    assert done.returncode == 0 and "replayed 4 dead letters" in done.stderr, done.stderr
    assert len(_raw_keys(pipeline)) == 8
