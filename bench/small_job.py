"""Benchmark: how long does a small job take on warm workers?

    .venv/bin/python -m bench.small_job [--records 50] [--jobs 3]

Starts the embedded broker, a preprocess worker and a MiniLM GPU worker (ONNX Runtime on this
CPU), warms them with one job, then submits --jobs jobs of --records short texts one after the
other with `nearline submit --wait`, and prints `nearline profile` for each: per-stage p50/p99 and
end to end. Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.bytecode import precompile
from bench.decoupling import exit_on_sigterm, machine
from bench.feed import short_texts
from jobs.launch.local import WorkerProcess, start_pipeline_workers, stop_all
from jobs.launch.runner import ensure_model
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import ENV_BOOTSTRAP
from kafka_io.topology import ENV_NAMESPACE
from model_repository.folders import ENV_MODEL_REPOSITORY, default_repository


@dataclass(frozen=True)
class LocalPipeline:
    broker: EmbeddedBroker
    preprocess: WorkerProcess
    gpu: WorkerProcess


@contextmanager
def local_pipeline(
    work: Path, namespace: str, repository: Path, gpu_args: tuple[str, ...] = ()
) -> Iterator[tuple[LocalPipeline, dict[str, str]]]:
    """The embedded broker, a preprocess and a MiniLM GPU worker (with `gpu_args`), stopped on the
    way out; and the environment a `nearline` command needs to reach them."""
    broker = EmbeddedBroker.start(work / "broker.log")
    env = {**os.environ, ENV_BOOTSTRAP: broker.bootstrap_servers, ENV_NAMESPACE: namespace}
    env[ENV_MODEL_REPOSITORY] = str(repository)
    workers = start_pipeline_workers(
        "minilm",
        bootstrap_servers=broker.bootstrap_servers,
        namespace=namespace,
        repository=repository,
        logs=work,
        gpu_args=gpu_args,
    )
    try:
        yield LocalPipeline(broker, *workers), env
    finally:
        stop_all(workers)
        broker.stop()


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--model-repository", type=Path, default=default_repository())
    args = parser.parse_args()
    precompile(Path(__file__).resolve().parents[1])  # the commands and workers start as installed
    repository = args.model_repository.resolve()
    ensure_model(repository, "minilm", print)
    namespace = "small"
    with tempfile.TemporaryDirectory(prefix="nearline-small-job-") as tmp:
        work = Path(tmp)
        with local_pipeline(work, namespace, repository) as (_, env):
            for n in range(args.jobs + 1):
                job = "warm-up" if n == 0 else f"small-{n}"
                source = work / f"{job}.jsonl"
                texts = short_texts(args.records)
                source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
                started = time.perf_counter()
                cli = [sys.executable, "-m", "jobs.cli"]
                subprocess.run(
                    [*cli, "submit", str(source), "--model", "minilm", "--job-id", job, "--wait"],
                    env=env,
                    check=True,
                    capture_output=True,
                    timeout=300,
                )
                took = time.perf_counter() - started
                if n == 0:
                    continue
                profile = json.loads(
                    subprocess.run(
                        [*cli, "profile", job, "--json"], env=env, check=True, capture_output=True, text=True
                    ).stdout
                )
                stages = "  ".join(f"{k} {v['p50_ms']:.0f}" for k, v in profile["stages"].items())
                e2e = profile["end_to_end"]
                p50, p99 = e2e["p50_ms"], e2e["p99_ms"]
                print(f"{job}: submit --wait {took:.2f} s; end to end p50 {p50:.0f} ms, p99 {p99:.0f} ms")
                print(f"  stage p50 ms: {stages}")
                print(
                    f"  {profile['batches']} executed batches {profile['batch_sizes']}, "
                    f"padding waste {profile['padding_waste']:.0%}, engine busy {profile['engine_busy_fraction']:.0%}",
                    flush=True,
                )
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
