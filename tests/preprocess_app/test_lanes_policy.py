"""The preprocess worker's lane rules, as pure functions: which lane a topic is, which lanes wait."""

from __future__ import annotations

from kafka_io.settings import Topics
from preprocess_app.lanes import batch_topic, held_lanes, model_of_tensors, topic_lane


def test_a_topic_names_its_lane_in_and_out_of_a_namespace() -> None:
    for topics in (Topics(), Topics("ns")):
        live = topics.lane(topics.raw_text, "live")
        assert topic_lane(topics, live) == "live" and topic_lane(topics, topics.raw_text) == "batch"
        assert batch_topic(topics, live) == topics.raw_text
        assert batch_topic(topics, topics.raw_image) == topics.raw_image
        for model in ("minilm", "x.live", "live.x"):
            for lane in ("live", "batch"):
                assert model_of_tensors(topics, topics.lane(topics.tensors(model), lane)) == model
    # a model named live.x is batch: only the namespace's own live. prefix makes a live lane
    assert topic_lane(Topics("ns"), Topics("ns").tensors("live.x")) == "batch"


def test_backpressure_holds_only_the_lane_whose_gpu_group_lags() -> None:
    topics = Topics("ns")
    batch, live = topics.tensors("m"), topics.lane(topics.tensors("m"), "live")
    assert held_lanes({batch: 10_000, live: 3}, topics, 1000) == {"batch"}
    assert held_lanes({batch: 10, live: 3000}, topics, 1000) == {"live"}
    assert held_lanes({batch: 10_000, live: 3000}, topics, None) == frozenset()
    assert held_lanes({}, topics, 0) == frozenset()
