"""A time before 1970 is before every record: `offsets reset --to-datetime` moves a group to the
start and `replay --from-time` reads everything, where Kafka's ListOffsets read -1, -2 and -3 as
its special offsets (the end, the start, the newest record) and refused earlier times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.replay import ReplaySpecError, parse_time_ms
from kafka_io.clients import make_producer
from kafka_io.offsets import group_offsets, reset_group_offsets
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import ENV_NAMESPACE, Topics
from schemas import RawText, encode

BEFORE_1970 = (
    "1969-12-31T23:59:59.999Z",
    "1969-12-31T23:59:59.998Z",
    "1969-12-31T23:59:59.997Z",
    "1960-01-01T00:00:00Z",
)


def nearline(settings: KafkaSettings, topics: Topics, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_times_are_whole_milliseconds_rounded_down_on_both_sides_of_1970() -> None:
    assert parse_time_ms("1970-01-01T00:00:00Z") == 0
    assert parse_time_ms("1969-12-31T23:59:59.999Z") == -1
    assert parse_time_ms("1969-12-31T23:59:59.9995Z") == -1
    assert parse_time_ms("1970-01-01T00:00:00.0015+00:00") == 1
    assert parse_time_ms("2026-11-29T18:00:00.123456Z") == 1795975200123
    assert parse_time_ms("9999-12-31T23:59:59.999Z") == 253402300799999
    with pytest.raises(ReplaySpecError, match="is not an ISO 8601 time"):
        parse_time_ms("1969-13-01")


def test_a_time_before_1970_resets_a_group_to_the_start_and_replays_every_record(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    topic = topics.raw_text
    ensure_topics(settings, [TopicSpec(topic, 2)])
    records = [
        OutRecord(topic, encode(RawText("job-t", f"r{i}", i, "m", f"text {i}", 0)), f"k{i}".encode()) for i in range(8)
    ]
    produce_all(make_producer(settings), records)
    group = topics.gpu_group("old")
    ends = {o.partition: o.end for o in group_offsets(settings, group, topic)}
    assert sum(ends.values()) == 8
    reset_group_offsets(settings, group, {(topic, p): end for p, end in ends.items()})
    names = ("--group", "gpu.old", "--topic", "raw.text")
    for when in BEFORE_1970:
        plan = nearline(settings, topics, "offsets", "reset", *names, "--to-datetime", when)
        assert plan.returncode == 0 and "Traceback" not in plan.stderr, (when, plan.stderr)
        assert sorted(plan.stdout.splitlines()) == [f"{topic}/{p}: {end} -> 0" for p, end in sorted(ends.items())], when
    done = nearline(settings, topics, "offsets", "reset", *names, "--to-datetime", BEFORE_1970[0], "--execute")
    assert done.returncode == 0, done.stderr
    assert {o.partition: o.committed for o in group_offsets(settings, group, topic)} == dict.fromkeys(ends, 0)
    for when in BEFORE_1970:
        replay = nearline(settings, topics, "replay", "--topic", "raw.text", "--from-time", when, "-o", "-")
        assert replay.returncode == 0, (when, replay.stderr)
        texts = sorted(json.loads(line)["record"]["text"] for line in replay.stdout.splitlines())
        assert texts == sorted(f"text {i}" for i in range(8)), when
    nothing = nearline(
        settings, topics, "replay", "--topic", "raw.text", "--from-offset", "0", "--to-time", BEFORE_1970[3], "-o", "-"
    )
    assert nothing.returncode == 0 and nothing.stdout == "", nothing.stderr  # no record is at or before 1960
