"""A new user's first commands, on Apache Kafka (auto.create.topics.enable=true, its default): reads of
a namespace where nothing was submitted yet. A metadata request that let the broker auto-create the
topics it named made them with Kafka's defaults (one partition, a 1 MB record limit, no compaction),
and the first `nearline submit` then refused them."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import ConfigResource, ResourceType

from jobs.submit import pipeline_topics
from kafka_io.clients import make_admin
from kafka_io.limits import MAX_RECORD_BYTES
from kafka_io.topics import TopicSpec, jobs_topic, schedule_ticks_topic, schedules_topic, topic_names
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline, submit


def namespace_topics(pipeline: RunningPipeline) -> list[str]:
    return [n for n in topic_names(pipeline.settings) if n.startswith(f"{pipeline.topics.namespace}.")]


def test_reads_before_the_first_submit_create_no_topic_and_the_submit_makes_every_topic_as_specified(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    topics = pipeline.topics
    reads = {
        ("results", "nope"): (1, f"no job nope in {topics.jobs}"),
        ("status", "nope"): (1, f"no job nope in {topics.jobs}"),
        ("jobs", "list"): (0, f"no jobs in {topics.jobs}"),
        ("schedule", "list"): (0, f"no schedules in {topics.schedules}"),
        ("dlq", "list"): (0, "0 dead letters"),
    }
    for args, (code, message) in reads.items():
        done = pipeline.cli(*args)
        assert done.returncode == code, (args, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
        assert done.stdout == "", (args, done.stdout)
    assert namespace_topics(pipeline) == []  # a read creates nothing

    submit(pipeline, write_jsonl(tmp_path / "in.jsonl", example_lines(3)))
    added = pipeline.cli("schedule", "add", "nightly", "--cron", "0 3 * * *", "--input", "x", "--model", "tiny")
    assert added.returncode == 0, added.stderr
    again = pipeline.cli("schedule", "list")  # the tick claims topic, read once the schedules table exists
    assert again.returncode == 0 and again.stdout.startswith("nightly\t"), again.stderr

    tables = [jobs_topic(topics), schedules_topic(topics), schedule_ticks_topic(topics)]
    specs: dict[str, TopicSpec] = {s.name: s for s in [*pipeline_topics(topics, "tiny"), *tables]}
    names = namespace_topics(pipeline)
    assert set(names) <= set(specs), sorted(set(names) - set(specs))
    assert {topics.results, topics.dead_letters, topics.jobs, topics.schedules} <= set(names), names
    admin = make_admin(pipeline.settings)
    metadata = admin.list_topics(timeout=10)
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names], request_timeout=10)
    for resource, future in futures.items():
        spec, config = specs[resource.name], future.result()
        assert len(metadata.topics[resource.name].partitions) == spec.partitions, resource.name
        assert int(config["max.message.bytes"].value) == MAX_RECORD_BYTES, resource.name
        # Kafka lists every setting; Tansu (NEARLINE_TEST_BROKER=tansu) only those a topic was
        # created with, and an unset policy is its default, delete
        policy = config["cleanup.policy"].value if "cleanup.policy" in config else "delete"
        assert policy == dict(spec.config).get("cleanup.policy", "delete"), resource.name
