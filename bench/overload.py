"""Benchmark: peak memory under a 10x overload, against the same pipeline at 1x.

    .venv/bin/python -m bench.overload [--records 1200] [--factor 10] [--seconds 90]

1x: one job of N records through a fresh embedded broker, preprocess worker and GPU worker.
10x: a fresh set again, with factor x N records submitted at once (the GPU side does ~100/s
here, so the backlog is minutes deep) and backpressure on (--max-tensor-lag); sampled for
`--seconds`, then stopped. Prints each process's peak RSS (VmHWM): the workers' must not grow
with the backlog. The broker's does: Tansu keeps every record in memory (no retention).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.decoupling import EXAMPLE, machine
from bench.procfs import status_field
from jobs.job_input import JobInput
from jobs.launch.local import start_pipeline_workers, stop_all
from jobs.launch.runner import WaitRules, ensure_model, watch_job
from jobs.submit import submit
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from model_repository.folders import default_repository


def peak_rss_mb(pid: int) -> float:
    return status_field(pid, "VmHWM") / 1024


def run(records: int, repository: Path, seconds: float, max_lag: int, workdir: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]
    workload = workdir / f"load-{records}.jsonl"
    with workload.open("w", encoding="utf-8") as f:
        for i in range(records):
            row = rows[i % len(rows)]
            f.write(json.dumps({"id": f"{i}-{row['id']}", "text": row["text"]}) + "\n")
    broker = EmbeddedBroker.start(workdir / f"broker-{records}.log")
    settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("overload")
    logs = workdir / f"workers-{records}"  # each run's worker logs apart
    logs.mkdir(exist_ok=True)
    workers = start_pipeline_workers(
        "minilm",
        bootstrap_servers=broker.bootstrap_servers,
        namespace=topics.namespace,
        repository=repository,
        logs=logs,
        preprocess_args=("--max-tensor-lag", str(max_lag)),
    )

    def check() -> None:
        for w in workers:
            w.check_alive()

    try:
        report = submit(settings, topics, JobInput(workload, "text"), "minilm")
        try:
            outcome, _ = watch_job(
                settings, topics, report.job_id, report.submitted, WaitRules(timeout_s=seconds, check=check)
            )
            done = len(outcome.results)
        except TimeoutError as exc:
            done = int(str(exc).split(":")[1].split()[0])
        return {
            "records": records,
            "done": done,
            "preprocess_mb": peak_rss_mb(workers[0].process.pid),
            "gpu_mb": peak_rss_mb(workers[1].process.pid),
            "broker_mb": peak_rss_mb(broker.pid),
        }
    finally:
        stop_all(workers)
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1200)
    parser.add_argument("--factor", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--max-tensor-lag", type=int, default=1024)
    parser.add_argument("--model-repository", type=Path, default=default_repository())
    args = parser.parse_args()
    ensure_model(args.model_repository, "minilm", print)
    with tempfile.TemporaryDirectory(prefix="nearline-overload-") as tmp:
        base = run(args.records, args.model_repository, 600, args.max_tensor_lag, Path(tmp))
        over = run(args.records * args.factor, args.model_repository, args.seconds, args.max_tensor_lag, Path(tmp))
    print(f"machine: {machine()}")
    print(f"{'load':<8}{'records':>9}{'done':>7}{'preprocess MB':>15}{'gpu MB':>9}{'broker MB':>11}")
    for name, r in (("1x", base), (f"{args.factor}x", over)):
        print(
            f"{name:<8}{r['records']:>9.0f}{r['done']:>7.0f}{r['preprocess_mb']:>15.0f}{r['gpu_mb']:>9.0f}"
            f"{r['broker_mb']:>11.0f}"
        )


if __name__ == "__main__":
    main()
