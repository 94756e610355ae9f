"""A preprocess worker's results caches (preprocess_app/reuse.py: CacheTails) on the real broker:
a model's cache.<model> is created at its first lookup when no GPU worker has made it yet, so the
tail follows it from the first result cached, and a job submitted right after the first finds it
(a tail that finds no topic looks again only every few seconds); a result is found only under the
engine that the topic says serves the model now (the GPU worker that started last)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import partitions_of
from kafka_io.topology import Topics
from model_repository.folders import load_model_config
from preprocess_app.reuse import CacheTails
from tests.support.cache_keys import ONNX_CPU, cache_key
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until


def test_a_models_cache_topic_is_made_at_its_first_lookup_and_followed_from_its_first_record(
    settings: KafkaSettings,
    topics: Topics,
    tiny: TinyModel,
    model_repository: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = topics.cache("tiny")
    assert not partitions_of(settings, cache)  # no GPU worker has made it
    with caplog.at_level(logging.WARNING):
        store = CacheTails(settings, topics, tmp_path / "spool")(load_model_config(model_repository, "tiny"))
    assert partitions_of(settings, cache)
    assert "does not exist" not in caplog.text
    key = os.urandom(32)
    produce_all(
        make_producer(settings),
        [OutRecord(cache, ONNX_CPU.encode(), b"runtime"), OutRecord(cache, b"cached", cache_key(key, ONNX_CPU))],
    )
    wait_until(lambda: store.get_many([key]), 30, "the result in the store", until=lambda got: got == [b"cached"])


def test_a_result_is_found_only_under_the_engine_that_serves_the_model_now(
    settings: KafkaSettings, topics: Topics, tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    cache = topics.cache("tiny")
    key, gpu = os.urandom(32), "torch/cuda/fp16"
    produce_all(
        make_producer(settings),
        [
            OutRecord(cache, b"on the CPU", cache_key(key, ONNX_CPU)),
            OutRecord(cache, b"on the GPU", cache_key(key, gpu)),
        ],
    )
    store = CacheTails(settings, topics, tmp_path / "spool")(load_model_config(model_repository, "tiny"))
    assert store.get_many([key]) == [None]  # cached, but no engine has said it serves the model
    for runtime, found in [(ONNX_CPU, b"on the CPU"), (gpu, b"on the GPU"), ("tensorrt/cuda/fp16", None)]:
        produce_all(make_producer(settings), [OutRecord(cache, runtime.encode(), b"runtime")])  # a worker starts
        expected: list[bytes | None] = [found]
        wait_until(lambda: store.get_many([key]), 30, f"{runtime}'s result", until=expected.__eq__)
