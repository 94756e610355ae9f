"""Benchmark: peak memory and time of the commands that read a whole large job.

    .venv/bin/python -m bench.results_memory [--records 1000000] [--dim 384] [--partitions 4]
        [--commands results results-parquet status profile report]

Starts the embedded broker, registers one job and produces --records synthetic results of it (a
--dim float32 embedding each, the MiniLM shape: random, L2-normalised, a different one per record,
so no format gains by compressing repeats; with every stage timestamp) straight to the results
topic in shuffled order, then runs each of `nearline results JOB -o FILE.jsonl` (results),
`results JOB -o FILE.parquet` (results-parquet), `status JOB`, `profile JOB` and
`report JOB -o FILE` in a subprocess of its own and prints its wall time, peak RSS (ru_maxrss of
that child) and output size. Figures, never assertions: the machine is shared. The broker
keeps every record in RAM (about records x (dim x 4 + 250) bytes).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.decoupling import exit_on_sigterm, machine
from jobs.registry import register
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord, job_record
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics, jobs_topic
from kafka_io.topology import ENV_NAMESPACE, Topics
from schemas import InferenceResult, Job, Tensor, encode

STEP_US = 1_000  # synthetic stage times: 1 ms a stage, a record submitted every 10 µs

JOB = "job-bench"


def results(topic: str, n: int, dim: int, seed: int = 7) -> Iterator[OutRecord]:
    """n results of JOB in a shuffled order, so the reader must reorder them."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    rng = np.random.default_rng(seed)
    keys = ("submitted", "preprocess_start", "preprocess_end", "batch_formed", "inference_start", "inference_end")
    for i in order:
        embedding = rng.standard_normal(dim, dtype=np.float32)
        tensor = Tensor.from_array("embedding", embedding / np.linalg.norm(embedding))
        stamps = {k: i * 10 + stage * STEP_US for stage, k in enumerate((*keys, "result_produced"))}
        value = encode(
            InferenceResult(JOB, f"r{i}", i, "minilm", "1", (tensor,), f"b{i // 64}", 64, {}, stamps, (), 20, 24)
        )
        yield job_record(topic, value, JOB, f"r{i}")


def measure(argv: list[str], env: dict[str, str], records: int, out: Path) -> None:
    """Run `nearline ARGV` and print its wall time and its own peak RSS (wait4's rusage of that
    child: RUSAGE_CHILDREN would give the largest of all children so far)."""
    with tempfile.TemporaryFile("w+") as log:
        started = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "jobs.cli", *argv], env=env, stdout=log, stderr=log, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        last = log.read().strip().splitlines()[-1:]
    peak_mib = usage.ru_maxrss / 1024  # KiB on Linux
    print(f"nearline {argv[0]} ({out.suffix or 'no file'}): exit {child.returncode}, {last}")
    print(f"  wall {seconds:.1f} s ({records / seconds:,.0f} records/s)")
    print(f"  peak RSS {peak_mib:,.0f} MiB ({peak_mib * 2**20 / records:,.0f} B/record)")
    if out.exists():
        print(f"  output {out.stat().st_size / 2**20:,.1f} MiB")


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--commands", nargs="+", default=["results", "results-parquet", "status", "profile", "report"])
    args = parser.parse_args()
    print(f"machine: {machine()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="nearline-results-bench-") as tmp:
        broker = EmbeddedBroker.start(Path(tmp) / "broker.log")
        try:
            settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("bench")
            ensure_topics(settings, [TopicSpec(t, args.partitions) for t in (topics.results, topics.dead_letters)])
            ensure_topics(settings, [jobs_topic(topics), TopicSpec(topics.tensors("minilm"), args.partitions)])
            register(settings, topics, Job(JOB, "minilm", "synthetic", "text", args.records, 0))
            started = time.perf_counter()
            produce_all(make_producer(settings), results(topics.results, args.records, args.dim), timeout_s=600)
            print(f"produced {args.records} results (dim {args.dim}) in {time.perf_counter() - started:.1f} s")
            env = {**os.environ, ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
            for command in args.commands:
                out = Path(tmp) / {"results": "out.jsonl", "results-parquet": "out.parquet"}.get(command, "out.html")
                argv = {
                    "results": ["results", JOB, "-o", str(out)],
                    "results-parquet": ["results", JOB, "-o", str(out)],
                    "status": ["status", JOB],
                    "profile": ["profile", JOB],
                    "report": ["report", JOB, "-o", str(out)],
                }[command]
                measure(argv, env, args.records, out)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
