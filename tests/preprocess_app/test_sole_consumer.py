"""The preprocess worker as its group's one member (`--sole-consumer`, what `nearline run` starts):
every partition without a join, offsets committed to the group a joining worker then uses."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from kafka_io.groups import live_groups
from kafka_io.offsets import group_lag
from kafka_io.reading import read_topics
from kafka_io.topics import partitions_of
from schemas.packs import read_tensor_pack
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline, submit
from tests.support.tiny_model import TinyModel


def tensor_ids(pipeline: RunningPipeline) -> Counter[str]:
    records = read_topics(pipeline.settings, [pipeline.topics.tensors("tiny")], idle_timeout_s=30)
    return Counter(record_id for r in records for record_id in read_tensor_pack(r.value or b"").record_ids)


def wait_for(condition, what: str, pipeline: RunningPipeline, timeout_s: float = 90) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        pipeline.check_workers()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_sole_preprocess_worker_reads_every_partition_and_a_group_member_resumes_after_it(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    topics, settings = pipeline.topics, pipeline.settings
    first = example_lines(60)
    sole = pipeline.start("preprocess", "preprocess", "--sole-consumer")
    submit(pipeline, write_jsonl(tmp_path / "first.jsonl", first))
    assert len(partitions_of(settings, topics.raw_text)) > 1  # the records are spread over several
    wait_for(lambda: sum(tensor_ids(pipeline).values()) >= len(first), "the first job's tensors", pipeline)
    group = topics.preprocess_app_id
    assert not live_groups(settings, [group])  # it read them all without becoming a member
    # committed to the preprocess group, as a member would (faust commits every few seconds)
    wait_for(lambda: group_lag(settings, group, topics.raw_text) == 0, "the commit", pipeline)
    assert sole.stop() == 0

    # a worker that joins the group afterwards starts where the sole one committed
    second = [{**row, "id": f"second-{row['id']}"} for row in example_lines(30)]
    pipeline.start("preprocess", "preprocess")
    submit(pipeline, write_jsonl(tmp_path / "second.jsonl", second))
    wait_for(lambda: sum(tensor_ids(pipeline).values()) >= len(first) + len(second), "the second job", pipeline)
    assert live_groups(settings, [group]) == {group}  # this one joined
    seen = tensor_ids(pipeline)
    assert set(seen) == {r["id"] for r in first + second}
    assert max(seen.values()) == 1  # nothing read twice: no record was lost or repeated
