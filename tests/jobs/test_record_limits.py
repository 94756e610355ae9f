"""One record limit (kafka_io/limits.py): an output over it is a size-capped dead letter, never a
refused produce that stops the worker on every redelivery; inputs over it are refused at submit."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobs.launch.runner import WaitRules, watch_job
from jobs.submit import pipeline_topics
from kafka_io.clients import make_producer
from kafka_io.limits import MAX_RECORD_BYTES, MAX_VALUE_BYTES
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord
from kafka_io.topics import TopicSpec, ensure_topics
from producers.inputs import MAX_ATTRIBUTES_BYTES
from schemas import DeadLetter, RawText, Tensor, TensorRecord, decode, encode
from schemas.records import DEAD_LETTER_PAYLOAD_BYTES
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import TinyModel


@pytest.mark.parametrize("mode", [(), ("--exactly-once",)], ids=["at-least-once", "exactly-once"])
def test_outputs_over_the_record_limit_are_capped_dead_letters_and_the_workers_go_on(
    pipeline: RunningPipeline, tiny: TinyModel, mode: tuple[str, ...]
) -> None:
    topics, job_id = pipeline.topics, "job-limits"
    # Every topic the job goes through, as a submit makes them before anything is produced: the
    # watch below starts before the workers have made theirs, and asking creates no topic.
    ensure_topics(pipeline.settings, pipeline_topics(topics, "tiny"))
    # A raw text whose tensor record is over the limit though the text itself fits: written by a
    # producer of another tool (attributes are capped at submit, not in the topic).
    near = {"note": "x" * (MAX_VALUE_BYTES + 20_000 - 1_000)}
    assert MAX_VALUE_BYTES < len(near["note"]) + 1_000 < MAX_RECORD_BYTES
    big_raw = encode(RawText(job_id, "big-raw", 0, "tiny", "hello world", 1, near))
    # A tensor record whose result is over what our producers may send (a foreign producer allows more)
    over = {"note": "y" * (MAX_RECORD_BYTES + 100_000)}
    ids = Tensor.from_array("input_ids", np.array([101, 2000, 102], dtype=np.int64))
    big_tensor = encode(TensorRecord(job_id, "big-tensor", 1, "tiny", "1", (ids,), over, {"submitted": 1}))
    good = [
        OutRecord(topics.raw_text, encode(RawText(job_id, f"r{i}", 2 + i, "tiny", f"text {i}", 1)), f"r{i}".encode())
        for i in range(10)
    ]
    header = [("job_id", job_id.encode())]
    oversized: dict[str, Any] = {"message.max.bytes": 3 * MAX_RECORD_BYTES}
    foreign = make_producer(pipeline.settings, **oversized)
    produce_all(
        foreign,
        [
            OutRecord(topics.raw_text, big_raw, b"big-raw", header),
            OutRecord(topics.tensors("tiny"), big_tensor, f"{job_id}/big-tensor".encode(), header),
            *good,
        ],
    )
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny", *mode)  # exactly-once: no transaction aborted forever
    outcome, _ = watch_job(
        pipeline.settings, topics, job_id, 12, WaitRules(check=pipeline.check_workers, timeout_s=180)
    )
    assert sorted(outcome.results) == sorted(f"r{i}" for i in range(10))
    assert {rid: (d.stage, d.error_type) for rid, d in outcome.dead.items()} == {
        "big-raw": ("preprocess", "RecordTooLargeError"),
        "big-tensor": ("inference", "RecordTooLargeError"),
    }
    letters = {
        d.record_id: d
        for d in (decode(m.value, DeadLetter) for m in read_topics(pipeline.settings, [topics.dead_letters]))
    }
    for rid, original in (("big-raw", big_raw), ("big-tensor", big_tensor)):
        letter = letters[rid]
        assert letter.truncated and letter.payload_size == len(original)
        assert letter.payload == original[:DEAD_LETTER_PAYLOAD_BYTES]
        assert letter.payload_sha256 == hashlib.sha256(original).hexdigest()
        assert "record limit" in letter.error
    pipeline.check_workers()  # neither worker stopped on a record's size


def test_dead_letters_cut_to_a_prefix_are_not_replayed(pipeline: RunningPipeline, tiny: TinyModel) -> None:
    topics = pipeline.topics
    ensure_topics(pipeline.settings, [TopicSpec(t) for t in (topics.raw_text, topics.dead_letters)])
    payload = b"z" * (DEAD_LETTER_PAYLOAD_BYTES * 3)
    letter = DeadLetter.from_error("preprocess", ValueError("boom"), (topics.raw_text, 0, 7, payload), job_id="j")
    produce_all(make_producer(pipeline.settings), [OutRecord(topics.dead_letters, encode(letter))])
    done = pipeline.cli("dlq", "replay", "--job", "j")
    assert done.returncode == 0, done.stderr
    assert f"keeps {DEAD_LETTER_PAYLOAD_BYTES:,} of its {len(payload):,} bytes" in done.stderr
    assert "replayed 0 dead letters" in done.stderr


def test_submit_refuses_attributes_over_their_cap_before_producing_anything(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    rows = [{"text": "fine"}, {"text": "too much", "attributes": {"blob": "a" * (MAX_ATTRIBUTES_BYTES + 1)}}]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    done = pipeline.cli("submit", str(source), "--model", "tiny")
    assert done.returncode != 0
    assert f"{source}:2:" in done.stderr and "attributes" in done.stderr
    ensure_topics(pipeline.settings, [TopicSpec(pipeline.topics.raw_text)])
    assert list(read_topics(pipeline.settings, [pipeline.topics.raw_text])) == []


def test_an_existing_topic_with_a_lower_record_limit_is_refused_before_anything_is_produced(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    # as an operator's topic on a real Kafka would be: created with the broker's ~1 MB default
    kafka_default = 1_048_588
    low = TopicSpec(pipeline.topics.raw_text, config=(("max.message.bytes", str(kafka_default)),))
    ensure_topics(pipeline.settings, [low])
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "fine"}\n', encoding="utf-8")
    done = pipeline.cli("submit", str(source), "--model", "tiny")
    assert done.returncode == 2, done.stderr
    assert f"{pipeline.topics.raw_text} (1,048,588)" in done.stderr and "max.message.bytes" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(read_topics(pipeline.settings, [pipeline.topics.raw_text])) == []
