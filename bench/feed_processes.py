"""bench/feed.py's drains by several GPU worker processes at once: the parent that starts them
together and adds up their figures, and the worker process each one runs (`--worker-process`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.feed_engines import SimulatedAccelerator, TimedEngine
from gpu_consumer.batcher import BatchSettings, default_window
from gpu_consumer.engines.factory import measure_cost
from gpu_consumer.steps import Inference
from gpu_consumer.windows import WindowSettings
from gpu_consumer.worker import LoopSettings, run
from kafka_io.clients import make_consumer, make_producer
from kafka_io.offsets import end_offsets, reset_group_offsets
from kafka_io.polling import assign_all
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from model_repository.folders import load_model_config


def drain_processes(
    settings: KafkaSettings, topics: Topics, repository: Path, processes: int, rate: float, per_call_s: float
) -> dict[str, float | str]:
    """The same drain by `processes` GPU worker processes, each with its own simulated accelerator
    and an equal share of the partitions, started together once all are warm. Each runs the real
    loop (gpu_consumer.worker.run); the share is what the group's range assignor gives N members,
    taken by assignment so the join (seconds on Tansu) does not skew the start."""
    tensors = topics.tensors("minilm")
    ends = end_offsets(settings, tensors)
    reset_group_offsets(settings, topics.gpu_group("minilm"), {(tensors, p): 0 for p in ends})
    shares = [sorted(ends)[i::processes] for i in range(processes)]
    spec = {"bootstrap": settings.bootstrap_servers, "namespace": topics.namespace, "repository": str(repository)}
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.feed",
                "--worker-process",
                json.dumps({**spec, "partitions": share, "rate": rate, "per_call_s": per_call_s}),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for share in shares
    ]
    for w in workers:
        assert w.stdout is not None and w.stdout.readline().strip() == "ready"
    for w in workers:
        assert w.stdin is not None
        w.stdin.write("go\n")
        w.stdin.flush()
    runs = [json.loads(w.communicate(timeout=600)[0].strip().splitlines()[-1]) for w in workers]
    wall = max(r["last_end"] for r in runs) - min(r["first_start"] for r in runs)
    records = sum(r["records"] for r in runs)
    label = f"{processes} processes, {rate:,.0f} rec/s each" if rate else f"{processes} processes, zero-cost"
    return {
        "engine": label,
        "records": records,
        "records_per_s": records / wall,
        "engine_busy": sum(r["device_s"] for r in runs) / (wall * processes),  # per accelerator
        "executed_batches": sum(r["calls"] for r in runs),
        "mean_batch": records / sum(r["calls"] for r in runs),
        "batch_sizes": "",
    }


def worker_process(spec: dict[str, object]) -> None:
    """One GPU worker process of drain_processes: warm up, say ready, wait for go, drain its share."""
    settings, topics = KafkaSettings(str(spec["bootstrap"])), Topics(str(spec["namespace"]))
    repository = Path(str(spec["repository"]))
    config = load_model_config(repository, "minilm")
    accelerator = SimulatedAccelerator(config, float(spec["rate"]), float(spec["per_call_s"]))  # type: ignore[arg-type]
    engine = TimedEngine(accelerator, "simulated")
    policy = BatchSettings(engine.max_batch_size, cost=measure_cost(accelerator, config))
    accelerator.device_s = 0.0
    consumer = make_consumer(settings, topics.gpu_group("minilm"))
    assignment = assign_all(consumer, topics.tensors("minilm"), list(spec["partitions"]))  # type: ignore[call-overload]
    limits = WindowSettings(default_window(policy.max_batch_size), 20.0)
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        inference = Inference(engine, config, topics, policy, f"feed-{spec['partitions']}")
        stats = run(consumer, assignment, lambda: make_producer(settings), inference, limits, LoopSettings(drain=True))
    finally:
        consumer.close()
    calls = sum(engine.sizes.values())
    print(
        json.dumps(
            {
                "records": stats.records,
                "first_start": engine.first_start,
                "last_end": engine.last_end,
                "device_s": accelerator.device_s,
                "calls": calls,
            }
        ),
        flush=True,
    )
