"""Topics Kafka will not create, on Apache Kafka (which enforces what Tansu does not): a name that
differs from an existing topic's only in '.' against '_' ("collides with existing topic"), one past
249 characters, one refused by the broker. A model whose tensors topics cannot be created has its
records dead-lettered with the reason while the preprocess worker goes on (one such record made it
exit on every restart), and `submit`/`produce` say why instead of a traceback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from kafka_io.clients import make_admin, make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import TopicFollower
from kafka_io.records import OutRecord, job_record, pack_record
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicRefusedError, TopicSpec, ensure_topics, lanes, try_ensure_topics
from kafka_io.topology import Topics
from schemas import DeadLetter, RawText, decode, encode
from schemas.packs import raw_text_pack_bytes, read_tensor_pack
from tests.support.apache_kafka import ApacheKafka
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import build_tiny_model
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository holding two models whose names differ only in '.' against '_'."""
    repository = tmp_path_factory.mktemp("twins")
    build_tiny_model(repository, "mini.lm")
    build_tiny_model(repository, "mini_lm")
    return repository


@pytest.fixture
def kafka_pipeline(apache_kafka: ApacheKafka, twins: Path, tmp_path: Path) -> Iterator[RunningPipeline]:
    p = RunningPipeline(
        KafkaSettings(apache_kafka.bootstrap_servers), Topics(f"r{time.monotonic_ns() % 10**9}"), twins, tmp_path / "l"
    )
    try:
        yield p
    finally:
        p.stop()


def test_kafka_itself_refuses_a_topic_differing_from_another_only_in_dot_and_underscore(
    kafka_pipeline: RunningPipeline,
) -> None:
    """The rule nearline checks before asking (kafka_io/topics.py: name_problem) is Kafka's own."""
    settings, topics = kafka_pipeline.settings, kafka_pipeline.topics
    ensure_topics(settings, [TopicSpec(topics.tensors("a.b"))])
    admin = make_admin(settings)  # held: a client destroyed meanwhile fails its futures
    futures = admin.create_topics([NewTopic(topics.tensors("a_b"), 1, 1)], request_timeout=15)
    with pytest.raises(KafkaException) as raised:
        futures[topics.tensors("a_b")].result()
    assert raised.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    assert "collides with existing topic" in raised.value.args[0].str()


def test_topics_that_cannot_be_created_are_refused_with_the_reason_and_the_others_created(
    kafka_pipeline: RunningPipeline,
) -> None:
    settings, topics = kafka_pipeline.settings, kafka_pipeline.topics
    ensure_topics(settings, [TopicSpec(topics.tensors("x.y"))])
    fine, twin, long = topics.tensors("fine"), topics.tensors("x_y"), topics.name("t" * 250)
    broker_says_no = TopicSpec(topics.tensors("three"), replication_factor=3)  # one node
    refused = try_ensure_topics(settings, [TopicSpec(fine), TopicSpec(twin), TopicSpec(long), broker_says_no])
    assert set(refused) == {twin, long, broker_says_no.name}
    assert refused[twin].startswith(f"it collides with the existing topic {topics.tensors('x.y')}")
    assert "over Kafka's limit of 249" in refused[long]
    assert "INVALID_REPLICATION_FACTOR" in refused[broker_says_no.name]
    assert try_ensure_topics(settings, [TopicSpec(fine)]) == {}  # created
    with pytest.raises(TopicRefusedError, match=r"topic .*tensors\.x_y cannot be created: it collides"):
        ensure_topics(settings, [TopicSpec(twin)])


@pytest.mark.timeout(240)
def test_the_preprocess_worker_dead_letters_records_of_a_model_whose_topics_collide_and_goes_on(
    kafka_pipeline: RunningPipeline,
) -> None:
    pipeline = kafka_pipeline
    settings, topics = pipeline.settings, pipeline.topics
    # mini.lm has had a job: its tensors topics exist, and mini_lm's cannot
    stages = (topics.tensors("mini.lm"), topics.raw_text, topics.raw_image)
    ensure_topics(settings, [*(s for t in stages for s in lanes(topics, TopicSpec(t))), TopicSpec(topics.dead_letters)])
    pipeline.start("preprocess", "preprocess")
    texts = ["one", "two", "three"]

    def pack(job_id: str, model: str) -> list[OutRecord]:
        ids = [f"p{i}" for i in range(len(texts))]
        data = raw_text_pack_bytes(job_id, model, 1, ids, range(len(texts)), texts, [{}] * len(texts))
        return [pack_record(topics.raw_text, data, job_id, "p0", len(texts))]

    single = encode(RawText("job-d", "r0", 0, "mini_lm", "a foreign record", 1, {}))
    produce_all(
        make_producer(settings),
        [*pack("job-c", "mini_lm"), job_record(topics.raw_text, single, "job-d", "r0"), *pack("job-e", "mini.lm")],
    )
    seen: dict[str, DeadLetter | str] = {}
    with TopicFollower(settings, [topics.dead_letters, topics.tensors("mini.lm")]) as follower:
        sent_after = False

        def took() -> int:
            nonlocal sent_after
            pipeline.check_workers()  # the worker exited on the batch, and again on every redelivery
            if len(seen) >= 7 and not sent_after:  # the worker went on: a later job is served too
                produce_all(make_producer(settings), pack("job-f", "mini.lm"))
                sent_after = True
            for m in follower.poll(0.5):
                if m.topic == topics.dead_letters:
                    letter = decode(m.value, DeadLetter)
                    seen[f"{letter.job_id}/{letter.record_id}"] = letter
                else:
                    p = read_tensor_pack(m.value)
                    seen.update({f"{p.job_id}/{r}": "tensor" for r in p.record_ids})
            return len(seen)

        wait_until(took, 180, lambda: f"10 records' outcomes: {seen}", until=lambda n: n >= 10, every_s=0)
    dead = {k: v for k, v in seen.items() if isinstance(v, DeadLetter)}
    assert sorted(dead) == ["job-c/p0", "job-c/p1", "job-c/p2", "job-d/r0"]
    assert sorted(k for k, v in seen.items() if v == "tensor") == [
        f"{j}/p{i}" for j in ("job-e", "job-f") for i in range(3)
    ]
    for letter in dead.values():
        assert letter.error_type == "ModelTopicsRefusedError"
        assert f"collides with the existing topic {topics.tensors('mini.lm')}" in letter.error
    assert [decode(dead[f"job-c/p{i}"].payload, RawText).text for i in range(3)] == texts
    assert pipeline.workers[0].process.poll() is None


def test_submit_and_produce_refuse_a_model_whose_topics_collide_with_a_message(
    kafka_pipeline: RunningPipeline, tmp_path: Path
) -> None:
    pipeline = kafka_pipeline
    ensure_topics(pipeline.settings, lanes(pipeline.topics, TopicSpec(pipeline.topics.tensors("mini.lm"))))
    given = tmp_path / "in.txt"
    given.write_text("one line\n")
    for command in (
        ["submit", str(given), "--model", "mini_lm"],
        ["produce", pipeline.topics.raw_text, str(given), "--model", "mini_lm"],
    ):
        done = pipeline.cli(*command)
        assert done.returncode == 2, (command, done.stderr)
        assert "Traceback" not in done.stderr
        assert f"collides with the existing topic {pipeline.topics.tensors('mini.lm')}" in done.stderr, done.stderr
