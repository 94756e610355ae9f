"""Benchmark: the CPU `nearline results JOB -o FILE` spends per record, JSON Lines and Parquet.

    .venv/bin/python -m bench.results_cost [--records 30000] [--dim 384] [--rounds 2]
        [--trees TREE ...] [--formats jsonl parquet] [--profile FILE]

Starts the embedded broker, registers one job (with its submission stamp, as submit does) and
produces --records MiniLM-shaped results of it straight into the results topic, encoded as the
GPU worker encodes them (schemas/result_encoding.ResultEncoder, a batch of 64 at a time; key
job/record, headers job_id and submission), in shuffled batch order. Then, --rounds times, for
each source tree given (PYTHONPATH=TREE: alternate the code before and after a change in one
sitting, on one broker) and each format, runs `python -m jobs.cli results JOB -o out.FORMAT` in a
child and prints its CPU (user + system, from wait4: imports included, as bench.system_cost
measures it; each tree's bytecode written first, as an installed copy has it) per record, and its
wall time. Outputs of the same format are compared byte for byte
across trees (Parquet: as tables, since writer metadata may differ).

--profile FILE: instead, run the first format's command in this process under cProfile and
write its stats to FILE (read them with `python -m pstats FILE`). Figures, never assertions: the
machine is shared.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.bytecode import precompile
from bench.decoupling import exit_on_sigterm, machine
from jobs.registry import register
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord, job_record
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics, jobs_topic
from kafka_io.topology import ENV_NAMESPACE, Topics
from schemas import Job
from schemas.result_encoding import ResultEncoder, RowTensor, encoded_ids, encoded_maps

JOB = "results-cost"
MODEL = "minilm"
SUBMITTED = 1_700_000_000_000_000
BATCH = 64


def results(topic: str, n: int, dim: int, seed: int = 7) -> Iterator[OutRecord]:
    """n results of JOB, batch by batch as a GPU worker writes them, the batches shuffled."""
    rng = np.random.default_rng(seed)
    encoder = ResultEncoder(MODEL, "1")
    starts = list(range(0, n, BATCH))
    random.Random(seed).shuffle(starts)
    for b, start in enumerate(starts):
        rows = range(start, min(start + BATCH, n))
        matrix = rng.standard_normal((len(rows), dim), dtype=np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        stamps = [
            {"submitted": SUBMITTED, "preprocess_start": SUBMITTED + i, "preprocess_end": SUBMITTED + i + 9}
            for i in rows
        ]
        values = encoder.encode_batch(
            ids=[encoded_ids(JOB, str(i), i) for i in rows],
            outputs=[RowTensor("embedding", matrix)],
            labels=None,
            batch_id=f"gpu-0:{b}",
            lengths=[12] * len(rows),
            padded_length=16,
            maps=[encoded_maps({}, s) for s in stamps],
            batch_timestamps={
                "batch_formed": SUBMITTED + 100,
                "inference_start": SUBMITTED + 101,
                "inference_end": SUBMITTED + 102,
                "result_produced": SUBMITTED + 103,
            },
        )
        for i, value in zip(rows, values, strict=True):
            yield job_record(topic, value, JOB, str(i), SUBMITTED)


def run_results(tree: Path, env: dict[str, str], out: Path) -> tuple[float, float]:
    """`nearline results JOB -o out` with tree's code: (CPU seconds, wall seconds)."""
    env = {**env, "PYTHONPATH": str(tree)}
    with tempfile.TemporaryFile("w+") as log:
        started = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "results", JOB, "-o", str(out)],
            env=env,
            cwd=tree,
            stdout=log,
            stderr=log,
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            log.seek(0)
            raise RuntimeError(f"results with {tree} failed:\n{log.read()[-2000:]}")
    return usage.ru_utime + usage.ru_stime, wall


def same_output(a: Path, b: Path) -> bool:
    if a.read_bytes() == b.read_bytes():
        return True
    if a.suffix == ".parquet":
        import pyarrow.parquet as pq

        return bool(pq.read_table(a).equals(pq.read_table(b)))
    return False


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path.cwd()])
    parser.add_argument("--formats", nargs="+", default=["jsonl", "parquet"], choices=["jsonl", "parquet", "arrow"])
    parser.add_argument("--profile", type=Path, default=None)
    args = parser.parse_args()
    print(f"machine: {machine()}, {os.cpu_count()} CPUs")
    for tree in args.trees:
        precompile(tree.absolute())
    with tempfile.TemporaryDirectory(prefix="nearline-results-cost-") as tmp:
        work = Path(tmp)
        broker = EmbeddedBroker.start(work / "broker.log")
        try:
            settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("results-cost")
            ensure_topics(settings, [TopicSpec(t, args.partitions) for t in (topics.results, topics.dead_letters)])
            ensure_topics(settings, [jobs_topic(topics)])
            register(
                settings, topics, Job(JOB, MODEL, "synthetic", "text", args.records, SUBMITTED, submission=SUBMITTED)
            )
            produce_all(make_producer(settings), results(topics.results, args.records, args.dim), timeout_s=600)
            print(f"produced {args.records:,} results (dim {args.dim})")
            if args.profile is not None:
                from jobs.registry import load_jobs
                from results.formats import OUTPUTS, output_format
                from results.job_output import JobOutput
                from results.spill import read_results

                out = work / f"profiled.{args.formats[0]}"
                profiler = cProfile.Profile()
                profiler.enable()
                with read_results(settings, topics, JOB, load_jobs(settings, topics).get(JOB)) as spill:
                    OUTPUTS[output_format(out)].write(JobOutput(spill, list), out, sys.stdout)
                profiler.disable()
                profiler.dump_stats(args.profile)
                print(f"profile of results -o {out.name} in {args.profile}")
                return
            env = {**os.environ, ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
            for round_ in range(args.rounds):
                for fmt in args.formats:
                    for t, tree in enumerate(args.trees):
                        out = work / f"tree{t}.{fmt}"
                        cpu, wall = run_results(tree.absolute(), env, out)
                        same = "" if t == 0 else f", same as tree 0: {same_output(work / f'tree0.{fmt}', out)}"
                        print(
                            f"round {round_ + 1} {fmt:8} {tree}: {cpu / args.records * 1e6:6.1f} us/record CPU, "
                            f"wall {wall:.2f} s{same}",
                            flush=True,
                        )
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
