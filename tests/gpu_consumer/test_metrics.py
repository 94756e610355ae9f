"""The GPU worker's metrics from a real window through the tiny model (no broker), and their
exposition as promtool lints it."""

from __future__ import annotations

import subprocess
import uuid

import numpy as np
import pytest
from prometheus_client import REGISTRY, generate_latest

from gpu_consumer.batcher import BatchSettings
from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
from gpu_consumer.metrics import PrometheusGpuMetrics
from gpu_consumer.window_inference import handle_window
from kafka_io.records import ConsumedRecord
from kafka_io.topology import Topics
from schemas import Tensor, TensorRecord, encode, now_us
from tests.support.promql import promtool
from tests.support.tiny_model import TinyModel


def record(seq: int, ids: np.ndarray, submitted: int) -> bytes:
    tensors = (Tensor.from_array("input_ids", ids),)
    return encode(TensorRecord("job-m", f"r{seq}", seq, "tiny", "1", tensors, {}, {"submitted": submitted}))


def test_one_window_is_measured_per_executed_batch(tiny: TinyModel) -> None:
    model = f"tiny-{uuid.uuid4().hex[:8]}"  # its own series in the process-wide registry
    topics = Topics(model)
    tensors = topics.tensors("tiny")
    metrics = PrometheusGpuMetrics(model)
    two_s_ago = now_us() - 2_000_000
    lengths = [4, 7, 2, 5]
    sources = [
        ConsumedRecord(tensors, 0, i, record(i, np.arange(101, 101 + n), two_s_ago)) for i, n in enumerate(lengths)
    ]
    sources.append(ConsumedRecord(tensors, 0, 9, record(9, np.array([1.5], np.float32), two_s_ago)))
    sources.append(ConsumedRecord(tensors, 0, 10, record(10, np.arange(101, 104), 0)))  # no submission
    engine = OnnxRuntimeEngine(tiny.config, threads=1)
    policy = BatchSettings(3, max_padding_waste=None)  # batches [2, 3, 4] and [5, 7]: padded to 4 and 7
    metrics.polled(tensors, len(sources))
    out = handle_window(sources, engine, tiny.config, topics, "w-0", policy, metrics.executed)
    metrics.produced(out)

    def value(name: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"model": model, **labels})

    assert value("nearline_batch_size_records_count") == 2
    assert value("nearline_batch_size_records_sum") == 5
    assert value("nearline_batch_size_records_bucket", le="2.0") == 1  # rows: 3 and 2
    assert value("nearline_real_tokens_total") == 2 + 3 + 4 + 5 + 7
    assert value("nearline_padded_tokens_total") == 3 * 4 + 2 * 7 == value("nearline_batch_padded_tokens_sum")
    assert value("nearline_padding_waste_ratio") == pytest.approx(1 - 21 / 26)
    assert value("nearline_inference_seconds_count") == 2
    busy = value("nearline_engine_busy_seconds_total")
    assert busy == pytest.approx(value("nearline_inference_seconds_sum")) and busy is not None and busy > 0
    assert 0 < (value("nearline_engine_busy_ratio") or 0) <= 1
    # five records ran, four with a submission stamp: 2 s (and a little) before their results
    assert value("nearline_end_to_end_seconds_count", lane="bulk") == 4
    assert value("nearline_end_to_end_seconds_bucket", lane="bulk", le="1.0") == 0
    assert value("nearline_end_to_end_seconds_bucket", lane="bulk", le="+Inf") == 4
    assert 8 <= (value("nearline_end_to_end_seconds_sum", lane="bulk") or 0) < 8 + 4 * 60
    assert value("nearline_lane_engine_seconds_total", lane="bulk") == busy
    assert value("nearline_end_to_end_seconds_count", lane="live") == 0
    # the same window again as the live lane's: its series, not the bulk lane's
    handle_window(sources, engine, tiny.config, topics, "w-1", policy, lambda run: metrics.executed(run, "live"))
    assert value("nearline_end_to_end_seconds_count", lane="live") == 4
    assert value("nearline_end_to_end_seconds_count", lane="bulk") == 4
    live_busy = value("nearline_lane_engine_seconds_total", lane="live")
    assert live_busy is not None and live_busy > 0
    assert value("nearline_engine_busy_seconds_total") == pytest.approx(busy + live_busy)
    traffic = {
        (name, topic): REGISTRY.get_sample_value(f"nearline_records_{name}_total", {"worker": "gpu", "topic": topic})
        for name, topic in [("consumed", tensors), ("produced", topics.results), ("produced", topics.dead_letters)]
    }
    assert list(traffic.values()) == [6, 5, 1]


@pytest.mark.process
def test_the_exposition_passes_promtools_lint(tiny: TinyModel) -> None:
    PrometheusGpuMetrics(f"tiny-{uuid.uuid4().hex[:8]}")
    checked = subprocess.run(
        [promtool(), "check", "metrics"], input=generate_latest(REGISTRY), capture_output=True, timeout=30
    )
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()
