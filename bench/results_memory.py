"""Benchmark: peak memory and time of `nearline results JOB -o file` on a large job.

    .venv/bin/python -m bench.results_memory [--records 1000000] [--dim 384] [--partitions 4]

Starts the embedded broker, produces --records synthetic results of one job (a --dim float32
embedding each, the MiniLM shape) straight to the results topic in shuffled order, then runs
`nearline results JOB -o FILE` in a subprocess and prints its wall time and peak RSS
(ru_maxrss of the child). Figures, never assertions: the machine is shared. The broker keeps
every record in RAM (about records x (dim x 4 + 150) bytes).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.decoupling import exit_on_sigterm, machine
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord, job_record
from kafka_io.settings import ENV_BOOTSTRAP, ENV_NAMESPACE, KafkaSettings, Topics
from kafka_io.topics import TopicSpec, ensure_topics
from schemas import InferenceResult, Tensor, encode

JOB = "job-bench"


def results(topic: str, n: int, dim: int, seed: int = 7) -> Iterator[OutRecord]:
    """n results of JOB in a shuffled order, so the reader must reorder them."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    embedding = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    for i in order:
        tensor = Tensor.from_array("embedding", embedding)
        value = encode(InferenceResult(JOB, f"r{i}", i, "minilm", "1", (tensor,), f"b{i // 64}", 64))
        yield job_record(topic, value, JOB, f"r{i}")


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    print(f"machine: {machine()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="nearline-results-bench-") as tmp:
        broker = EmbeddedBroker.start(Path(tmp) / "broker.log")
        try:
            settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("bench")
            ensure_topics(settings, [TopicSpec(t, args.partitions) for t in (topics.results, topics.dead_letters)])
            started = time.perf_counter()
            produce_all(make_producer(settings), results(topics.results, args.records, args.dim), timeout_s=600)
            print(f"produced {args.records} results (dim {args.dim}) in {time.perf_counter() - started:.1f} s")
            out = Path(tmp) / "out.jsonl"
            env = {**os.environ, ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "jobs.cli", "results", JOB, "-o", str(out)],
                env=env,
                capture_output=True,
                text=True,
            )
            seconds = time.perf_counter() - started
            peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
            print(f"nearline results: exit {done.returncode}, {done.stderr.strip()}")
            print(f"  wall {seconds:.1f} s ({args.records / seconds:,.0f} records/s)")
            print(f"  peak RSS {peak_mib:,.0f} MiB ({peak_mib * 2**20 / args.records:,.0f} B/record)")
            print(f"  output {out.stat().st_size / 2**20:,.0f} MiB")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
