"""A submit writes raw.text in packs (#41) and everything that counts what it wrote counts records:
the job's total, submit's report, `status`'s preprocessed count and the --max-backlog check."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jobs.job_input import JobInput
from jobs.registry import job_status, load_jobs
from jobs.submit import BacklogRefusedError, JobSettings, backlog, submit
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import job_record, pack_record
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from schemas import Tensor, TensorRecord, encode
from schemas.packs import PackHead, PackSettings, read_raw_text_pack, tensor_pack_bytes


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "text": t}) + "\n" for i, t in enumerate(texts)), "utf-8")
    return path


def _packs(settings: KafkaSettings, topic: str, job_id: str) -> list[tuple[int, bytes, int]]:
    """(records header, value, first seq) of the job's Kafka records in `topic`, in seq order."""
    found = [m for m in read_topics(settings, [topic]) if m.job_id == job_id]
    return sorted(((m.records, m.value, int(read_raw_text_pack(m.value).seqs[0])) for m in found), key=lambda p: p[2])


@pytest.mark.timeout(120)
def test_a_submitted_file_lands_in_raw_text_as_packs_of_its_records_in_order(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    texts = [f"text number {i}" + " é" * (i % 5) for i in range(300)]
    report = submit(
        settings, topics, JobInput.open(str(_jsonl(tmp_path / "in.jsonl", texts))), "tiny", JobSettings(job_id="j300")
    )
    assert report.submitted == 300
    assert load_jobs(settings, topics)["j300"].total == 300
    packs = _packs(settings, topics.raw_text, "j300")
    assert [count for count, _, _ in packs] == [128, 128, 44]  # ceil(300 / 128) packs, the default limit
    read = [read_raw_text_pack(value) for _, value, _ in packs]
    assert [rid for p in read for rid in p.record_ids] == [f"r{i}" for i in range(300)]
    assert [t for p in read for t in p.texts] == texts
    assert [int(s) for p in read for s in p.seqs] == list(range(300))
    assert {(p.job_id, p.model, p.submitted_at) for p in read} == {("j300", "tiny", report.submission)}


@pytest.mark.timeout(120)
def test_packs_are_cut_by_bytes_and_each_kafka_record_stays_within_the_limit(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    texts = ["é" * (700 + 37 * i) for i in range(40)]  # 1.4-4.1 KB of UTF-8 each: about 3-7 a pack
    texts[20] = "x" * 12_000  # larger than a pack: a pack alone
    limits = PackSettings(max_records=128, max_bytes=10_000)
    source = JobInput.open(str(_jsonl(tmp_path / "in.jsonl", texts)))
    report = submit(settings, topics, source, "tiny", JobSettings(job_id="jbytes", pack_limits=limits))
    assert report.submitted == 40 and load_jobs(settings, topics)["jbytes"].total == 40
    packs = _packs(settings, topics.raw_text, "jbytes")
    read = [read_raw_text_pack(value) for _, value, _ in packs]
    assert [t for p in read for t in p.texts] == texts
    assert [int(s) for p in read for s in p.seqs] == list(range(40))
    assert [count for count, _, _ in packs] == [len(p) for p in read]
    alone = next(p for p in read if "r20" in p.record_ids)
    assert alone.record_ids == ["r20"]
    others = [(len(value), len(p)) for (_, value, _), p in zip(packs, read, strict=True) if p is not alone]
    assert all(size <= 10_000 for size, _ in others), others
    assert max(n for _, n in others) > 1  # cut by bytes, not one text a pack
    # and not far early: the next pack's first text would not have fitted (256: the size estimate's slack)
    for (_, value, _), after in zip(packs, read[1:], strict=False):
        assert len(value) + len(after.texts[0].encode()) > 10_000 - 256


@pytest.mark.timeout(120)
def test_status_counts_every_record_of_a_tensor_pack_as_preprocessed(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    source = JobInput.open(str(_jsonl(tmp_path / "in.jsonl", [f"t{i}" for i in range(6)])))
    report = submit(settings, topics, source, "tiny", JobSettings(job_id="jst"))
    ids = [np.array([101, 7, 102], dtype=np.int64) for _ in range(3)]
    pack = tensor_pack_bytes(
        PackHead("jst", "tiny", "1", "input_ids", {"submitted": 1}), ["r0", "r1", "r2"], [0, 1, 2], ids, [{}] * 3
    )
    single = encode(TensorRecord("jst", "r4", 4, "tiny", "1", (Tensor.from_array("input_ids", ids[0]),), {}, {}))
    tensors = topics.tensors("tiny")
    produce_all(
        make_producer(settings),
        [
            pack_record(tensors, pack, "jst", "r0", 3, report.submission),
            job_record(tensors, single, "jst", "r4", report.submission),  # a foreign single record
        ],
    )
    counts = job_status(settings, topics, "jst").counts()
    assert (counts["submitted"], counts["preprocessed"]) == (6, 4)


@pytest.mark.timeout(120)
def test_max_backlog_counts_the_records_of_the_packs_waiting(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    submit(
        settings,
        topics,
        JobInput.open(str(_jsonl(tmp_path / "a.jsonl", ["a"] * 100))),
        "tiny",
        JobSettings(job_id="jwait"),
    )
    assert backlog(settings, topics, "tiny", topics.raw_text) == {topics.raw_text: 100, topics.tensors("tiny"): 0}
    second = JobInput.open(str(_jsonl(tmp_path / "b.jsonl", ["b"] * 50)))
    with pytest.raises(BacklogRefusedError, match=r"the backlog is 100 records .* adds 50, over the maximum of 120"):
        submit(settings, topics, second, "tiny", JobSettings(job_id="jrefused", max_backlog=120))
    assert submit(settings, topics, second, "tiny", JobSettings(job_id="jin", max_backlog=150)).submitted == 50
