"""The preprocess worker as its group's one member (`--sole-consumer`, what `nearline run` starts):
every partition without a join, offsets committed to the group a joining worker then uses."""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path

from kafka_io.groups import live_groups
from kafka_io.offsets import group_lag
from kafka_io.reading import read_topics
from kafka_io.topics import partitions_of
from schemas.packs import read_tensor_pack
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline, submit
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until


def tensor_ids(pipeline: RunningPipeline) -> Counter[str]:
    records = read_topics(pipeline.settings, [pipeline.topics.tensors("tiny")], idle_timeout_s=30)
    return Counter(record_id for r in records for record_id in read_tensor_pack(r.value or b"").record_ids)


def tensor_count(pipeline: RunningPipeline) -> int:
    return sum(tensor_ids(pipeline).values())


def test_a_sole_preprocess_worker_reads_every_partition_and_a_group_member_resumes_after_it(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    topics, settings, check = pipeline.topics, pipeline.settings, pipeline.check_workers
    first = example_lines(60)
    sole = pipeline.start("preprocess", "preprocess", "--sole-consumer")
    submit(pipeline, write_jsonl(tmp_path / "first.jsonl", first))
    assert len(partitions_of(settings, topics.raw_text)) > 1  # the records are spread over several
    tensors = partial(tensor_count, pipeline)
    wait_until(tensors, 90, "the first job's tensors", until=lambda n: n >= len(first), every_s=0.2, meanwhile=check)
    group = topics.preprocess_app_id
    assert not live_groups(settings, [group])  # it read them all without becoming a member
    # committed to the preprocess group, as a member would (faust commits every few seconds)
    wait_until(
        lambda: group_lag(settings, group, topics.raw_text),
        90,
        "the commit",
        until=lambda n: n == 0,
        every_s=0.2,
        meanwhile=check,
    )
    assert sole.stop() == 0

    # a worker that joins the group afterwards starts where the sole one committed
    second = [{**row, "id": f"second-{row['id']}"} for row in example_lines(30)]
    pipeline.start("preprocess", "preprocess")
    submit(pipeline, write_jsonl(tmp_path / "second.jsonl", second))
    total = len(first) + len(second)
    wait_until(tensors, 90, "the second job's tensors", until=lambda n: n >= total, every_s=0.2, meanwhile=check)
    assert live_groups(settings, [group]) == {group}  # this one joined
    seen = tensor_ids(pipeline)
    assert set(seen) == {r["id"] for r in first + second}
    assert max(seen.values()) == 1  # nothing read twice: no record was lost or repeated
