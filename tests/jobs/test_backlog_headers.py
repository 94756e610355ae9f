"""The --max-backlog check counts packs by their `records` header, which any producer may write: a
header is never trusted beyond what its pack's bytes can hold (schemas/packs.py: records_held)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.job_input import JobInput
from jobs.submit import JobSettings, backlog, pipeline_topics, submit
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import ensure_topics
from kafka_io.topology import Topics
from schemas.packs import MIN_RECORD_BYTES, raw_text_pack_bytes


@pytest.mark.timeout(120)
def test_a_foreign_pack_claiming_countless_records_counts_only_what_its_bytes_can_hold(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    ensure_topics(settings, pipeline_topics(topics, "tiny"))
    data = raw_text_pack_bytes("job-x", "tiny", 1, ["a", "b"], [0, 1], ["one", "two"], [{}, {}])
    claims = [("job_id", b"job-x"), ("records", b"9999999999999999999")]
    produce_all(make_producer(settings), [OutRecord(topics.raw_text, data, b"job-x/a", claims)])

    waiting = backlog(settings, topics, "tiny", topics.raw_text)[topics.raw_text]
    assert 2 <= waiting <= len(data) // MIN_RECORD_BYTES
    given = tmp_path / "in.jsonl"
    given.write_text("".join(json.dumps({"id": f"r{i}", "text": "t"}) + "\n" for i in range(5)), "utf-8")
    report = submit(settings, topics, JobInput.open(str(given)), "tiny", JobSettings(job_id="jin", max_backlog=1000))
    assert report.submitted == 5
