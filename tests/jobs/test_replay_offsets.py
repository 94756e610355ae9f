"""nearline replay and nearline offsets against the real broker."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpu_consumer.windows import WindowSettings, windows
from kafka_io.clients import make_admin, make_consumer, make_producer
from kafka_io.groups import group_names
from kafka_io.polling import commit_offsets, subscribe, window_offsets
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import Topics
from schemas import RawText, encode
from tests.support.pipeline import RunningPipeline
from tests.support.records import key
from tests.support.waiting import wait_until


def produce_texts(pipeline: RunningPipeline, topic: str, texts: list[str], partitions: int = 2) -> None:
    ensure_topics(pipeline.settings, [TopicSpec(topic, partitions)])
    records = [
        OutRecord(topic, encode(RawText("job-r", f"r-{t}", i, "m", t, 0)), key=t.encode()) for i, t in enumerate(texts)
    ]
    produce_all(make_producer(pipeline.settings), records)


def replay(pipeline: RunningPipeline, tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    out = tmp_path / "replay.jsonl"
    done = pipeline.cli("replay", *args, "-o", str(out))
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_replay_from_an_offset_decodes_records_and_stops_at_the_end(pipeline: RunningPipeline, tmp_path: Path) -> None:
    topic = pipeline.topics.raw_text
    produce_texts(pipeline, topic, [f"text {i}" for i in range(20)])
    by_partition: dict[int, list[str]] = {}
    for msg in read_topics(pipeline.settings, [topic]):
        by_partition.setdefault(msg.partition, []).append(key(msg))
    lines = replay(
        pipeline, tmp_path, "--topic", "raw.text", "--partition", "1", "--from-offset", "1", "--to-offset", "3"
    )
    assert [(line["partition"], line["offset"]) for line in lines] == [(1, 1), (1, 2)]
    assert [line["record"]["text"] for line in lines] == by_partition[1][1:3]
    assert all(line["type"] == "nearline.RawText" for line in lines)
    everything = replay(pipeline, tmp_path, "--topic", "raw.text", "--from-offset", "0")
    assert len(everything) == 20


def test_a_replay_with_nothing_in_its_range_ends_at_once_with_no_record(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    """A consumer assigned past a partition's end hears of no end: such a replay waited out its
    60 s idle timeout and then blamed the broker."""
    topic = pipeline.topics.raw_text
    produce_texts(pipeline, topic, [f"text {i}" for i in range(20)])
    for args in (
        ("--from-offset", "500"),
        ("--from-offset", "15", "--to-offset", "5"),
        ("--from-offset", "3", "--to-offset", "3"),
    ):
        assert replay(pipeline, tmp_path, "--topic", "raw.text", *args) == [], args  # exit 0, not 3 after 60 s
    produce_texts(pipeline, pipeline.topics.name("nothing-yet"), [])
    assert replay(pipeline, tmp_path, "--topic", "nothing-yet", "--from-offset", "0") == []


def test_replay_from_a_time_returns_only_later_records(pipeline: RunningPipeline, tmp_path: Path) -> None:
    topic = pipeline.topics.raw_text
    produce_texts(pipeline, topic, [f"before {i}" for i in range(5)])
    # the cut: a millisecond past the last stored record's timestamp, and passed before the next are written
    cut_ms = max(m.timestamp_ms for m in read_topics(pipeline.settings, [topic])) + 1
    cut = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=cut_ms)
    wait_until(lambda: time.time_ns() // 1_000_000 > cut_ms, 10, f"the clock past the cut {cut}", every_s=0.001)
    produce_texts(pipeline, topic, [f"after {i}" for i in range(7)])
    later = replay(pipeline, tmp_path, "--topic", "raw.text", "--from-time", cut.isoformat())
    assert sorted(line["record"]["text"] for line in later) == sorted(f"after {i}" for i in range(7))
    earlier = replay(pipeline, tmp_path, "--topic", "raw.text", "--from-offset", "0", "--to-time", cut.isoformat())
    assert sorted(line["record"]["text"] for line in earlier) == sorted(f"before {i}" for i in range(5))


def test_offsets_show_and_reset_a_stopped_group(pipeline: RunningPipeline) -> None:
    topic, group = pipeline.topics.raw_text, pipeline.topics.gpu_group("replay")
    produce_texts(pipeline, topic, [f"text {i}" for i in range(12)], partitions=1)
    consumer = make_consumer(pipeline.settings, group)
    first = next(windows(consumer, subscribe(consumer, [topic]), WindowSettings(5, 5000)))
    commit_offsets(consumer, window_offsets(first))
    consumer.close()
    names = ("--group", "gpu.replay", "--topic", "raw.text")  # inside the namespace (NEARLINE_NAMESPACE)

    shown = pipeline.cli("offsets", "show", *names)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1] == "0\t5\t12\t7"
    dry = pipeline.cli("offsets", "reset", *names, "--to-offset", "2", "--dry-run")
    assert f"{topic}/0: 5 -> 2" in dry.stdout
    assert pipeline.cli("offsets", "show", *names).stdout.splitlines()[1] == "0\t5\t12\t7"
    # as kafka-consumer-groups: without --execute the moves are printed and nothing moves
    plan = pipeline.cli("offsets", "reset", *names, "--to-earliest")
    assert plan.returncode == 0 and f"{topic}/0: 5 -> 0" in plan.stdout, plan.stderr
    assert "plan only: nothing changed; add --execute to move the group" in plan.stderr
    old = pipeline.cli("offsets", "reset", *names, "--to-time", "2000-01-01T00:00:00Z")  # a name it never kept
    assert old.returncode == 2 and "No such option '--to-time'" in old.stderr and not old.stdout, old.stderr
    assert pipeline.cli("offsets", "show", *names).stdout.splitlines()[1] == "0\t5\t12\t7"
    for args, committed in ((["--to-offset", "2"], 2), (["--to-latest"], 12), (["--to-earliest"], 0)):
        done = pipeline.cli("offsets", "reset", *names, *args, "--execute")
        assert done.returncode == 0, done.stderr
        row = pipeline.cli("offsets", "show", *names).stdout.splitlines()[1]
        assert row.split("\t")[1] == str(committed)


def test_a_replay_or_reset_that_names_no_start_two_or_a_bad_time_is_a_usage_error(pipeline: RunningPipeline) -> None:
    topic = pipeline.topics.raw_text
    produce_texts(pipeline, topic, ["a", "b"])
    topic = "raw.text"  # inside the namespace
    group = ("--group", "g-untouched", "--topic", topic)
    cases = {
        ("replay", "--topic", topic, "--from-time", "yesterday"): "'yesterday' is not an ISO 8601 time",
        ("replay", "--topic", topic, "--from-offset", "0", "--to-time", "2026-13-01"): "is not an ISO 8601 time",
        ("replay", "--topic", topic): "exactly one of --from-offset and --from-time",
        ("replay", "--topic", topic, "--from-offset", "0", "--from-time", "2026-11-29T18:00:00Z"): "exactly one",
        ("offsets", "reset", *group, "--to-datetime", "noon"): "'noon' is not an ISO 8601 time",
        ("offsets", "reset", *group): "exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime",
        ("offsets", "reset", *group, "--to-earliest", "--execute", "--dry-run"): "--execute and --dry-run contradict",
        ("offsets", "reset", *group, "--to-time", "2026-11-29T18:00:00Z"): "No such option '--to-time'",
        ("offsets", "reset", *group, "--to-earliest", "--to-offset", "1"): "exactly one of",
        ("replay", "--topic", topic, "--from-offset", "-5"): "-5 is not in the range x>=0",
        (
            "replay",
            "--topic",
            topic,
            "--from-offset",
            "0",
            "--partition",
            "9",
        ): "has no partition 9: its partitions are 0-1",
        ("offsets", "reset", *group, "--to-offset", "-1"): "-1 is not in the range x>=0",
        # it wrote JSON Lines into a .parquet or .csv whatever the suffix said
        ("replay", "--topic", topic, "--from-offset", "0", "-o", "x.parquet"): "x.parquet: replay writes JSON Lines",
        ("replay", "--topic", topic, "--from-offset", "0", "-o", "x.csv"): "x.csv: replay writes JSON Lines",
    }
    for args, message in cases.items():
        done = pipeline.cli(*args)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and not done.stdout, args


def test_a_topic_that_does_not_exist_is_named_with_the_topics_that_do_and_is_not_created(
    pipeline: RunningPipeline,
) -> None:
    """Reading a missing topic created it (Tansu auto-creates on metadata), and a typo then read as "0 records"."""
    topic = pipeline.topics.raw_text
    produce_texts(pipeline, topic, ["a", "b"])
    typo = "raw.textx"
    group = ("--group", "g-untouched", "--topic", typo)
    for args in (
        ("replay", "--topic", typo, "--from-offset", "0"),
        ("replay", "--topic", typo, "--from-time", "2026-11-29T18:00:00Z"),
        ("offsets", "show", *group),
        ("offsets", "reset", *group, "--to-earliest"),
        ("offsets", "reset", *group, "--to-latest", "--dry-run"),
    ):
        done = pipeline.cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert (
            f"no topic '{pipeline.topics.name(typo)}'" in done.stderr and "nothing was read or created" in done.stderr
        ), args
        assert f"its topics, closest first: {topic}," in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and not done.stdout, args
    admin = make_admin(pipeline.settings)
    assert pipeline.topics.name(typo) not in admin.list_topics(timeout=10).topics


def test_a_reset_of_a_group_with_members_is_refused_before_any_move_is_printed(pipeline: RunningPipeline) -> None:
    """The moves were printed as if made, then a raw KafkaError{code=UNKNOWN_MEMBER_ID...} followed."""
    topic, group = pipeline.topics.raw_text, pipeline.topics.gpu_group("live")
    produce_texts(pipeline, topic, [f"text {i}" for i in range(12)], partitions=1)
    consumer = make_consumer(pipeline.settings, group)
    try:
        first = next(windows(consumer, subscribe(consumer, [topic]), WindowSettings(5, 5000)))
        commit_offsets(consumer, window_offsets(first))  # a member now, and it stays one until closed
        refused = pipeline.cli(
            "offsets", "reset", "--group", "gpu.live", "--topic", "raw.text", "--to-earliest", "--execute"
        )
        assert refused.returncode == 1, refused.stderr
        assert f"group {group} has active members: stop its workers, then reset" in refused.stderr
        assert "KafkaError" not in refused.stderr and not refused.stdout
        dry = pipeline.cli(
            "offsets", "reset", "--group", "gpu.live", "--topic", "raw.text", "--to-earliest", "--dry-run"
        )
        assert dry.returncode == 0, dry.stderr
        assert f"{topic}/0: 5 -> 0" in dry.stdout and "has active members" in dry.stderr
    finally:
        consumer.close()
    shown = pipeline.cli("offsets", "show", "--group", "gpu.live", "--topic", "raw.text")
    assert shown.stdout.splitlines()[1] == "0\t5\t12\t7"  # nothing moved


def test_offsets_of_an_unknown_group_are_refused_naming_the_groups_that_exist(pipeline: RunningPipeline) -> None:
    """`offsets show --group nosuch` printed lag as if the group existed; `offsets reset` created it."""
    topic, group = pipeline.topics.raw_text, pipeline.topics.gpu_group("known")
    produce_texts(pipeline, topic, [f"text {i}" for i in range(12)], partitions=1)
    consumer = make_consumer(pipeline.settings, group)
    first = next(windows(consumer, subscribe(consumer, [topic]), WindowSettings(5, 5000)))
    commit_offsets(consumer, window_offsets(first))
    consumer.close()
    typo = "gpu.knownx"
    for args in (("show",), ("reset", "--to-earliest"), ("reset", "--to-latest", "--dry-run")):
        done = pipeline.cli("offsets", *args, "--group", typo, "--topic", "raw.text")
        assert done.returncode == 2, (args, done.stderr)
        assert (
            f"no consumer group {pipeline.topics.name(typo)!r}" in done.stderr
            and "nothing was read or changed" in done.stderr
        )
        assert f"its groups, closest first: {group}" in done.stderr, done.stderr
        assert not done.stdout and "Traceback" not in done.stderr
    assert pipeline.topics.name(typo) not in group_names(pipeline.settings)  # nothing created
    assert pipeline.cli("offsets", "show", "--group", "gpu.known", "--topic", "raw.text").returncode == 0


def test_namespace_prefixes_the_topic_and_group_that_replay_and_offsets_name(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    """--namespace (NEARLINE_NAMESPACE, which the deploy manifests set) was ignored by `replay`
    and `offsets`: they read the bare names, another pipeline's topics or none (#40, 12)."""
    mine, other = pipeline.topics, Topics(pipeline.topics.namespace + "b")
    for topics, count, committed in ((mine, 6, 2), (other, 9, 4)):
        produce_texts(pipeline, topics.raw_text, [f"{topics.namespace} {i}" for i in range(count)], partitions=1)
        consumer = make_consumer(pipeline.settings, topics.gpu_group("ns"))
        first = next(windows(consumer, subscribe(consumer, [topics.raw_text]), WindowSettings(committed, 5000)))
        commit_offsets(consumer, window_offsets(first))
        consumer.close()
    names = ("--group", "gpu.ns", "--topic", "raw.text")
    for flag, topics, count, committed in (((), mine, 6, 2), (("--namespace", other.namespace), other, 9, 4)):
        lines = replay(pipeline, tmp_path, "--topic", "raw.text", "--from-offset", "0", *flag)
        assert {line["topic"] for line in lines} == {topics.raw_text} and len(lines) == count, flag
        shown = pipeline.cli("offsets", "show", *names, *flag)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[1] == f"0\t{committed}\t{count}\t{count - committed}", flag
        moved = pipeline.cli("offsets", "reset", *names, "--to-earliest", "--execute", *flag)
        assert moved.returncode == 0 and f"{topics.raw_text}/0: {committed} -> 0" in moved.stdout, moved.stderr
        assert f"group {topics.gpu_group('ns')} reset on {topics.raw_text}" in moved.stderr
    # the other namespace's group was moved only by the run that named it
    assert pipeline.cli("offsets", "show", *names).stdout.splitlines()[1] == "0\t0\t6\t6"
    # a whole name, typed as before the fix, is named with the prefix that doubled it
    whole = pipeline.cli("replay", "--topic", mine.raw_text, "--from-offset", "0")
    assert whole.returncode == 2, whole.stderr
    assert f"no topic '{mine.name(mine.raw_text)}'" in whole.stderr, whole.stderr
    assert f"--namespace {mine.namespace} prefixes every name given: give 'raw.text'" in whole.stderr
    group = pipeline.cli("offsets", "show", "--group", mine.gpu_group("ns"), "--topic", "raw.text")
    assert group.returncode == 2 and "give 'gpu.ns'" in group.stderr, group.stderr
