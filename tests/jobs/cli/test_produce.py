"""`nearline produce` writes only where the workers read its records' kind, and a record a worker
cannot decode is still dead-lettered as part of its job (#30)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.launch.runner import WaitRules, watch_job
from jobs.registry import load_jobs
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import job_record
from kafka_io.topics import TopicSpec, ensure_topics
from schemas import RawText, encode, now_us
from tests.support.pipeline import RunningPipeline
from tests.support.records import record_keys_in
from tests.support.tiny_model import TinyModel


@pytest.mark.timeout(180)
def test_produce_refuses_a_topic_that_is_not_the_raw_topic_of_its_kind_and_sends_nothing(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    texts = tmp_path / "in.txt"
    texts.write_text("one\ntwo\n")
    ns = pipeline.topics
    for topic in ("mytopic", ns.tensors("tiny"), ns.raw_image, ns.results, "raw.text.extra"):
        done = pipeline.cli("produce", topic, str(texts), "--model", "tiny", "--job-id", "job-wrong")
        assert done.returncode == 2, done.stderr
        assert f"Invalid value for 'TOPIC': {topic!r}: text records go to {ns.raw_text}" in done.stderr
        assert f"images to {ns.raw_image}" in done.stderr
    assert "job-wrong" not in load_jobs(pipeline.settings, pipeline.topics)

    images = tmp_path / "pics"
    images.mkdir()
    (images / "a.jpg").write_bytes(b"jpeg")
    refused = pipeline.cli("produce", ns.raw_text, str(images), "--model", "tiny", "--job-id", "job-wrong")
    assert refused.returncode == 2 and f"image records go to {ns.raw_image}" in refused.stderr

    done = pipeline.cli("produce", ns.raw_text, str(texts), "--model", "tiny", "--job-id", "job-right")
    assert done.returncode == 0, done.stderr
    assert f"produced 2 records to {ns.raw_text} as job job-right" in done.stderr
    ensure_topics(pipeline.settings, [TopicSpec(ns.raw_text)])
    keys = sorted(record_keys_in(read_topics(pipeline.settings, [ns.raw_text])))
    assert keys == ["job-right/1", "job-right/2"]


@pytest.mark.timeout(180)
def test_a_record_the_preprocess_worker_cannot_decode_is_dead_lettered_as_part_of_its_job(
    pipeline: RunningPipeline, tiny: TinyModel
) -> None:
    """Another writer's records (a text in raw.image, bytes that are not Avro) once went to the
    dead-letter topic with job None: the job they belonged to never completed."""
    ns = pipeline.topics
    ensure_topics(pipeline.settings, [TopicSpec(t) for t in (ns.raw_text, ns.raw_image, ns.dead_letters)])
    text = encode(RawText("job-odd", "t1", 0, "tiny", "a text", now_us()))
    produce_all(
        make_producer(pipeline.settings),
        [job_record(ns.raw_image, text, "job-odd", "t1"), job_record(ns.raw_text, b"not avro", "job-odd", "b2")],
    )
    pipeline.start("preprocess", "preprocess")
    outcome, _ = watch_job(pipeline.settings, ns, "job-odd", 2, WaitRules(check=pipeline.check_workers, timeout_s=120))
    assert sorted(outcome.dead) == ["b2", "t1"]
    assert {letter.job_id for letter in outcome.dead.values()} == {"job-odd"}
    assert outcome.dead["t1"].source_topic == ns.raw_image
