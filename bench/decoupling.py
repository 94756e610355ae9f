"""Benchmark: does decoupling pay? Four configurations, the same workload, one run.

    .venv/bin/python -m bench.decoupling [--records N] [--batch-size B] [--engine auto|onnxruntime|torch]

(a) serial: per record, tokenize -> infer at batch 1 -> postprocess: the coupled service this replaces
(b) in-process batcher, no Kafka: tokenize a window, sort and bucket, infer the planned batches
(c) the decoupled pipeline: embedded broker, a preprocess and a GPU worker (warmed up first)
(d) the engine alone on ready-made tensors, the same planned batches: the ceiling
Latency is a record's completion time from the start of the job (all records are submitted at
once, as in a batch job). Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpu_consumer.batcher import BatchSettings, default_window, make_batch, pad_batch, plan_batches
from gpu_consumer.engines.factory import make_engine
from gpu_consumer.engines.protocol import Engine
from gpu_consumer.postprocess import postprocess
from jobs.job_input import JobInput
from jobs.launch.local import start_pipeline_workers, stop_all
from jobs.launch.runner import WaitRules, ensure_model, watch_job
from jobs.reports.profile import profile
from jobs.submit import submit
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from model_repository.config import ModelConfig
from model_repository.folders import default_repository
from preprocess_app.models import load_tokenizer
from preprocess_app.text import tokenize

EXAMPLE = Path(__file__).parents[1] / "producers" / "examples" / "python-docs-paragraphs.jsonl"


@dataclass(frozen=True)
class Figures:
    name: str
    records_per_s: float
    p50_ms: float
    p99_ms: float
    engine_busy: float
    mean_batch: float
    padding_waste: float


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


class Clock:
    """Completion times since the job started, and the time spent inside the engine."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.done: list[float] = []
        self.busy = 0.0

    def infer(self, engine: Engine, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        t0 = time.perf_counter()
        out = engine.infer(inputs)
        self.busy += time.perf_counter() - t0
        return out

    def figures(self, name: str, batches: list[int], real: int, padded: int) -> Figures:
        wall = time.perf_counter() - self.start
        ms = np.array(self.done) * 1000
        return Figures(
            name,
            len(self.done) / wall,
            float(np.percentile(ms, 50)),
            float(np.percentile(ms, 99)),
            self.busy / wall,
            float(np.mean(batches)),
            1 - real / padded if padded else 0.0,
        )


def serial(config: ModelConfig, engine: Engine, texts: list[str]) -> Figures:
    tokenizer = load_tokenizer(config.tokenizer_path, config.max_length)
    clock = Clock()
    real = 0
    for text in texts:
        (ids,) = tokenize(tokenizer, [text], config.max_length)
        batch = pad_batch(config, [ids])
        postprocess(config, clock.infer(engine, batch.inputs), batch, engine.postprocessed)
        clock.done.append(time.perf_counter() - clock.start)
        real += len(ids)
    return clock.figures("(a) serial, batch 1", [1] * len(texts), real, real)


def batched(
    config: ModelConfig,
    engine: Engine,
    texts: list[str],
    policy: BatchSettings,
    window: int,
    pretokenized: list[np.ndarray] | None = None,
) -> Figures:
    tokenizer = load_tokenizer(config.tokenizer_path, config.max_length)
    clock = Clock()
    sizes, real, padded = [], 0, 0
    for start in range(0, len(texts), window):
        if pretokenized is None:
            ids = tokenize(tokenizer, texts[start : start + window], config.max_length)
        else:
            ids = pretokenized[start : start + window]
        for rows in plan_batches([len(i) for i in ids], policy, config.buckets, engine.pad_to_bucket):
            batch = make_batch(config, [ids[i] for i in rows])
            postprocess(config, clock.infer(engine, batch.inputs), batch, engine.postprocessed)
            clock.done += [time.perf_counter() - clock.start] * len(rows)
            sizes.append(len(rows))
            real += int(batch.lengths.sum())
            padded += batch.padded_tokens
    name = "(d) engine alone, same batches" if pretokenized else "(b) in-process batcher, no Kafka"
    if pretokenized:  # the ceiling counts engine time only
        clock.start = time.perf_counter() - clock.busy
    return clock.figures(name, sizes, real, padded)


def arrival_order_waste(config: ModelConfig, ids: list[np.ndarray], batch_size: int) -> float:
    real = padded = 0
    for start in range(0, len(ids), batch_size):
        chunk = ids[start : start + batch_size]
        real += sum(len(i) for i in chunk)
        padded += len(chunk) * max(len(i) for i in chunk)
    return 1 - real / padded


def pipeline(
    repository: Path, config: ModelConfig, workload: Path, batch_size: int, engine: str, workdir: Path
) -> Figures:
    broker = EmbeddedBroker.start(workdir / "broker.log")
    settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("bench")
    workers = start_pipeline_workers(
        config.name,
        bootstrap_servers=broker.bootstrap_servers,
        namespace=topics.namespace,
        repository=repository,
        logs=workdir,
        gpu_args=("--max-batch-size", str(batch_size), "--engine", engine),
    )
    try:

        def check() -> None:
            for w in workers:
                w.check_alive()

        warm = workdir / "warmup.jsonl"
        warm.write_text("".join(json.dumps({"text": f"warm up sentence {i}"}) + "\n" for i in range(batch_size)))
        report = submit(settings, topics, JobInput(warm, "text"), config.name)
        watch_job(settings, topics, report.job_id, report.submitted, WaitRules(check=check, timeout_s=300))
        report = submit(settings, topics, JobInput(workload, "text"), config.name)
        outcome, _ = watch_job(
            settings, topics, report.job_id, report.submitted, WaitRules(check=check, timeout_s=1800)
        )
    finally:
        stop_all(workers)
        broker.stop()
    p = profile(outcome.results.values())
    return Figures(
        "(c) decoupled pipeline via Kafka",
        p.records_per_s,
        p.end_to_end.p50_ms,
        p.end_to_end.p99_ms,
        p.engine_busy_fraction,
        p.mean_batch_size,
        p.padding_waste,
    )


def exit_on_sigterm() -> None:
    """`timeout` and the device tool stop a run with SIGTERM: exit through the finally blocks, which
    stop the broker and workers started in their own sessions, instead of orphaning them."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--records", type=int, default=1200, help="first N records of the shipped example")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--model-repository", type=Path, default=default_repository())
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    config = ensure_model(args.model_repository, args.model, print)
    rows = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()][: args.records]
    texts = [r["text"] for r in rows]
    engine = make_engine(config, args.engine)
    engine.warmup()
    policy = BatchSettings(args.batch_size)
    window = default_window(args.batch_size)  # what the GPU worker polls by default
    tokenizer = load_tokenizer(config.tokenizer_path, config.max_length)
    ids = tokenize(tokenizer, texts, config.max_length)

    results: list[Figures] = []
    steps: list[Callable[[], Figures]] = [
        lambda: serial(config, engine, texts),
        lambda: batched(config, engine, texts, policy, window),
        lambda: batched(config, engine, texts, policy, window, pretokenized=ids),
    ]
    for step in steps:
        results.append(step())
        print(results[-1])
    with tempfile.TemporaryDirectory(prefix="nearline-bench-") as tmp:
        workload = Path(tmp) / "workload.jsonl"
        workload.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        results.append(pipeline(args.model_repository, config, workload, args.batch_size, args.engine, Path(tmp)))
    a, b, d, c = results
    table = [a, b, c, d]

    how = getattr(engine, "providers", None) or f"{getattr(engine, 'device', '')} {getattr(engine, 'precision', '')}"
    print(f"\nmachine: {machine()}; engine {engine.name} ({how})")
    print(
        f"workload: {len(rows)} records of {EXAMPLE.name}, {config.name}:{config.version}, batch size {args.batch_size}"
    )
    print(f"{'configuration':<36}{'rec/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'busy':>7}{'batch':>7}{'pad waste':>10}")
    for f in table:
        print(
            f"{f.name:<36}{f.records_per_s:>8.1f}{f.p50_ms:>9.0f}{f.p99_ms:>9.0f}{f.engine_busy:>7.0%}"
            f"{f.mean_batch:>7.1f}{f.padding_waste:>10.1%}"
        )
    print(f"(c)/(a) = {c.records_per_s / a.records_per_s:.2f}   (c)/(d) = {c.records_per_s / d.records_per_s:.2f}")
    print(
        f"padding waste, pad to longest in arrival order at batch {args.batch_size}: "
        f"{arrival_order_waste(config, ids, args.batch_size):.1%}; with sorting and buckets: {d.padding_waste:.1%}"
    )
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "figures": [f.__dict__ for f in table]}, indent=2))


if __name__ == "__main__":
    main()
