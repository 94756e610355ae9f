"""Benchmark: what the GPU worker's metrics cost per executed batch, on this CPU.

    .venv/bin/python -m bench.metrics_cost [--rows 64] [--width 32] [--repeat 20000]

Times the calls the emit thread makes per executed batch with --metrics-port (executed: rows,
tokens, inference seconds, busy, each record's end-to-end latency; produced: outputs by topic)
against the base class the worker holds without it, and end-to-end latency observed one
Histogram.observe per record, the way this code does not; and what serving one scrape of the
worker's registry takes. Figures, never assertions.
"""

from __future__ import annotations

import argparse
import time
import uuid

import numpy as np
from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest

from gpu_consumer.batcher import PaddedBatch
from gpu_consumer.metrics import END_TO_END, GpuMetrics, PrometheusGpuMetrics
from gpu_consumer.window_inference import Executed, Item
from kafka_io.records import ConsumedRecord, OutRecord
from schemas import now_us


def batch(rows: int, width: int) -> tuple[Executed, list[OutRecord]]:
    lengths = np.random.default_rng(0).integers(1, width + 1, rows)
    submitted = now_us() - 1_500_000
    items = [
        Item(ConsumedRecord("t", 0, i, b""), "job", f"r{i}", i, np.zeros(n), {}, {"submitted": submitted})
        for i, n in enumerate(lengths)
    ]
    padded = PaddedBatch({"input_ids": np.zeros((rows, width), np.int64)}, lengths)
    start = now_us()
    outputs = [OutRecord("results", b"x", b"k") for _ in range(rows)]
    return Executed(items, padded, {}, start, start + 5000), outputs


def per_call_us(metrics: GpuMetrics, run: Executed, outputs: list[OutRecord], repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        metrics.executed(run)
        metrics.produced(outputs)
    return (time.perf_counter() - started) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=20000)
    args = parser.parse_args()
    run, outputs = batch(args.rows, args.width)
    on = PrometheusGpuMetrics(f"bench-{uuid.uuid4().hex[:6]}")
    off = GpuMetrics()
    per_call_us(on, run, outputs, 1000)  # warm
    figures = {"off": per_call_us(off, run, outputs, args.repeat), "on": per_call_us(on, run, outputs, args.repeat)}
    histogram = Histogram("e2e_seconds", "", registry=CollectorRegistry(), buckets=tuple(END_TO_END.bounds))
    seconds = [1.5] * args.rows
    started = time.perf_counter()
    for _ in range(args.repeat):
        for s in seconds:
            histogram.observe(s)
    figures["observe per record (end-to-end only)"] = (time.perf_counter() - started) / args.repeat * 1e6
    started = time.perf_counter()
    for _ in range(200):
        generate_latest(REGISTRY)
    figures["one scrape (the GPU worker's registry)"] = (time.perf_counter() - started) / 200 * 1e6
    print(f"per executed batch of {args.rows} rows ({args.width} tokens wide), {args.repeat} batches:")
    for name, us in figures.items():
        print(f"  {name:<40}{us:>8.1f} µs")


if __name__ == "__main__":
    main()
