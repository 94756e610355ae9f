"""The GPU worker's loop reports what it consumed, ran and produced, pipelined and exactly-once,
on the real broker (in this process, so its registry is read directly)."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import REGISTRY

from gpu_consumer.batcher import BatchSettings
from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
from gpu_consumer.metrics import PrometheusGpuMetrics
from gpu_consumer.steps import Inference
from gpu_consumer.windows import WindowSettings
from gpu_consumer.worker import LoopSettings, run
from kafka_io.clients import make_consumer
from kafka_io.polling import subscribe
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from tests.support.pipeline import feed_tensors, new_producers
from tests.support.tiny_model import TinyModel

RECORDS = 40


@pytest.mark.parametrize("transactional", [False, True], ids=["pipelined", "exactly-once"])
def test_the_worker_loop_reports_every_window_and_executed_batch(
    settings: KafkaSettings, topics: Topics, tiny: TinyModel, transactional: bool
) -> None:
    feed_tensors(settings, topics, "job-m", RECORDS)
    model = f"tiny-{uuid.uuid4().hex[:8]}"  # its own series in the process-wide registry
    metrics = PrometheusGpuMetrics(model)
    consumer = make_consumer(settings, topics.gpu_group("tiny"))
    new_producer = new_producers(settings, f"{topics.gpu_group('tiny')}.{model}" if transactional else None)
    try:
        stats = run(
            consumer,
            subscribe(consumer, [topics.tensors("tiny")]),
            new_producer,
            Inference(OnnxRuntimeEngine(tiny.config, threads=1), tiny.config, topics, BatchSettings(8), "m"),
            WindowSettings(16, 20.0),
            LoopSettings(drain=True, transactional=transactional, metrics=metrics),
        )
    finally:
        consumer.close()
    assert stats.records == RECORDS

    def value(name: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"model": model, **labels})

    def records(name: str, topic: str) -> float | None:
        return REGISTRY.get_sample_value(f"nearline_records_{name}_total", {"worker": "gpu", "topic": topic})

    # the topics are this test's own: the process-wide counters hold only its records
    assert records("consumed", topics.tensors("tiny")) == RECORDS
    assert records("produced", topics.results) == RECORDS
    assert value("nearline_batch_size_records_sum") == RECORDS
    batches = value("nearline_batch_size_records_count")
    assert batches is not None and batches >= RECORDS / 8 and value("nearline_inference_seconds_count") == batches
    assert value("nearline_real_tokens_total") == 3 * RECORDS  # feed_tensors: three token ids each
    assert value("nearline_end_to_end_seconds_count", lane="bulk") == RECORDS  # the bulk lane's tensors
    assert value("nearline_lane_engine_seconds_total", lane="bulk") == value("nearline_engine_busy_seconds_total")
    assert value("nearline_lane_engine_seconds_total", lane="live") == 0
    assert value("nearline_windows_in_flight") == 0
