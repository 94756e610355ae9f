"""The preprocess worker's lane rules, as pure functions: which lane a topic is, which lanes wait,
and how its lag and metrics count the records of packs."""

from __future__ import annotations

import uuid

from prometheus_client import REGISTRY

from kafka_io.records import OutRecord, pack_record
from kafka_io.topology import Topics
from preprocess_app.lanes import RecordsPerPack, batch_topic, held_lanes, model_of_tensors, topic_lane
from preprocess_app.metrics import PrometheusPreprocessMetrics


def test_a_topic_names_its_lane_in_and_out_of_a_namespace() -> None:
    for topics in (Topics(), Topics("ns")):
        live = topics.lane(topics.raw_text, "live")
        assert topic_lane(topics, live) == "live" and topic_lane(topics, topics.raw_text) == "bulk"
        assert batch_topic(topics, live) == topics.raw_text
        assert batch_topic(topics, topics.raw_image) == topics.raw_image
        for model in ("minilm", "x.live", "live.x"):
            for lane in ("live", "bulk"):
                assert model_of_tensors(topics, topics.lane(topics.tensors(model), lane)) == model
    # a model named live.x is batch: only the namespace's own live. prefix makes a live lane
    assert topic_lane(Topics("ns"), Topics("ns").tensors("live.x")) == "bulk"


def test_backpressure_holds_only_the_lane_whose_gpu_group_lags() -> None:
    topics = Topics("ns")
    batch, live = topics.tensors("m"), topics.lane(topics.tensors("m"), "live")
    assert held_lanes({batch: 10_000, live: 3}, topics, 1000) == {"bulk"}
    assert held_lanes({batch: 10, live: 3000}, topics, 1000) == {"live"}
    assert held_lanes({batch: 10_000, live: 3000}, topics, None) == frozenset()
    assert held_lanes({}, topics, 0) == frozenset()


def test_a_tensor_topics_lag_in_packs_is_counted_in_the_records_this_worker_packed() -> None:
    per_pack = RecordsPerPack()
    assert per_pack.records("t", 7) == 7  # nothing written yet: a pack counts one record
    per_pack.add("t", 128)
    per_pack.add("t", 32)
    per_pack.add("u", 1)
    assert per_pack.records("t", 3) == 240  # 80 records a pack
    assert per_pack.records("u", 3) == 3
    assert per_pack.records("t", 0) == 0


def test_the_metrics_count_the_records_of_packs_and_a_dead_letter_as_one() -> None:
    metrics = PrometheusPreprocessMetrics()
    topic = f"tensors-{uuid.uuid4().hex[:8]}"
    dead = f"dead-{uuid.uuid4().hex[:8]}"
    metrics.produced(
        [
            pack_record(topic, b"", "job", "r0", 100),
            pack_record(topic, b"", "job", "r100", 28),
            OutRecord(dead, b""),
        ]
    )
    metrics.batch(topic + "-in", 129, 0.1, "live")

    def value(name: str, topic: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"worker": "preprocess", "topic": topic})

    assert value("nearline_records_produced_total", topic) == 128
    assert value("nearline_records_produced_total", dead) == 1
    assert value("nearline_records_consumed_total", topic + "-in") == 129
