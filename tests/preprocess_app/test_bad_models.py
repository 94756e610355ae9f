"""A preprocess worker on the real broker, fed records naming paths and broken models: it stays up,
dead-letters them with the reason, and keeps serving the good records (#12 row 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import TopicFollower, read_topics
from kafka_io.records import job_record
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import Topics
from schemas import DeadLetter, RawText, decode, encode
from schemas.packs import read_tensor_pack
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import broken_repository
from tests.support.waiting import wait_until


def produce_texts(settings: KafkaSettings, topics: Topics, job_id: str, models: list[str]) -> None:
    """Raw records as any writer of raw.text could send them: the submit CLI checks names, others may not."""
    records = [
        job_record(topics.raw_text, encode(RawText(job_id, f"r{i}", i, m, f"text {i}", 1, {})), job_id, f"r{i}")
        for i, m in enumerate(models)
    ]
    produce_all(make_producer(settings), records)


@pytest.mark.timeout(240)
def test_a_worker_dead_letters_path_names_and_broken_models_and_keeps_serving(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    repository = broken_repository(tmp_path / "models")
    pipeline = RunningPipeline(settings, topics, repository, tmp_path / "logs")
    names = (topics.raw_text, topics.raw_image, topics.dead_letters, topics.tensors("tiny"))
    ensure_topics(settings, [TopicSpec(t) for t in names])
    try:
        pipeline.start("preprocess", "preprocess")
        models = ["tiny", "tiny/.", str(repository / "tiny"), "badtok", "badcfg", "tiny"]
        produce_texts(settings, topics, "job-a", models)
        produce_texts(settings, topics, "job-b", ["tiny", "badtok"])  # after the broken ones: still served
        seen: dict[str, DeadLetter | str] = {}
        with TopicFollower(settings, [topics.dead_letters, topics.tensors("tiny")]) as follower:

            def took() -> int:
                pipeline.check_workers()  # the old worker exited on the batch, and again on every redelivery
                for m in follower.poll(0.5):
                    if m.topic == topics.dead_letters:
                        letter = decode(m.value, DeadLetter)
                        seen[f"{letter.job_id}/{letter.record_id}"] = letter
                    else:  # a tensor pack: single records of one job submission travel together
                        pack = read_tensor_pack(m.value)
                        seen.update({f"{pack.job_id}/{r}": "tensor" for r in pack.record_ids})
                return len(seen)

            wait_until(took, 180, lambda: f"8 records' outcomes: {seen}", until=lambda n: n >= 8, every_s=0)
        outcome = {k: v if isinstance(v, str) else v.error_type for k, v in seen.items()}
        assert outcome == {
            "job-a/r0": "tensor",
            "job-a/r1": "InvalidModelNameError",
            "job-a/r2": "InvalidModelNameError",
            "job-a/r3": "ModelUnavailableError",
            "job-a/r4": "ModelUnavailableError",
            "job-a/r5": "tensor",
            "job-b/r0": "tensor",
            "job-b/r1": "ModelUnavailableError",
        }
        assert all(
            d.error.startswith("model unavailable: ")
            for d in seen.values()
            if isinstance(d, DeadLetter) and d.error_type == "ModelUnavailableError"
        )
        assert pipeline.workers[0].process.poll() is None
    finally:
        pipeline.stop()
    # nothing was written anywhere a path-like name could point to
    topic_names = {m.topic for m in read_topics(settings, list(names))}
    assert topic_names <= set(names)


def test_submit_and_workers_refuse_a_model_name_that_is_a_path(pipeline: RunningPipeline, tmp_path: Path) -> None:
    good = tmp_path / "in.txt"
    good.write_text("one line\n")
    for command in (
        ["submit", str(good), "--model", "tiny/."],
        ["produce", pipeline.topics.raw_text, str(good), "--model", "/etc"],
        ["worker", "gpu", "--model", "../tiny"],
        ["schedule", "add", "s", "--cron", "* * * * *", "--input", str(good), "--model", "Tiny"],
    ):
        done = pipeline.cli(*command)
        assert done.returncode == 2, (command, done.stderr)
        assert "invalid model name" in done.stderr and "Traceback" not in done.stderr
    ensure_topics(pipeline.settings, [TopicSpec(pipeline.topics.raw_text)])
    assert list(read_topics(pipeline.settings, [pipeline.topics.raw_text])) == []
