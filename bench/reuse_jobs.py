"""Benchmark: what a job over a changed file costs when results are reused (docs/reuse.md).

    .venv/bin/python -m bench.reuse_jobs [--records 20000] [--model-repository PATH]

On the embedded broker, a real preprocess worker and a real GPU worker (the shipped MiniLM on the
CPU), warmed with a 50-record job:
- job A: `nearline submit --wait` of --records texts;
- job B: the same file with 2% of its rows edited, 2% added and 2% removed (its unchanged rows are
  reused, the edited and added ones computed);
- job C: B's file again with --no-reuse (every row computed: what B costs without reuse);
- for each, the wall time of `submit --wait` and the CPU seconds of every process meanwhile
  (workers and broker from /proc, submit from its rusage), and B's and C's against A's.
Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

from bench.bytecode import precompile
from bench.decoupling import exit_on_sigterm, machine
from bench.procfs import cpu_seconds
from bench.system_cost import WARM_UP_GRACE_S, timed_command
from jobs.launch.local import PREPROCESS_ENV, WorkerProcess, spawn_worker, stop_all
from jobs.launch.runner import ensure_model
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import ENV_BOOTSTRAP
from kafka_io.topology import ENV_NAMESPACE
from model_repository.folders import ENV_MODEL_REPOSITORY, default_repository

MODEL = "minilm"
NAMESPACE = "reuse-jobs"
WORDS = ["kafka", "records", "results", "reuse", "model", "tokens", "embed", "topic", "worker", "partition", "offset"]


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24))) for i in range(n)]


def inputs(records: int, work: Path) -> tuple[Path, Path]:
    """A's file, and B's: 2% of A's rows edited, 2% removed, 2% added."""
    a = [{"id": f"r{i}", "text": t} for i, t in enumerate(texts(records, 1))]
    picked = random.Random(52).sample(range(records), 2 * records // 50)
    removed, edited = set(picked[: records // 50]), set(picked[records // 50 :])
    b = [{"id": r["id"], "text": r["text"] + " (edited)" if i in edited else r["text"]} for i, r in enumerate(a)]
    b = [r for i, r in enumerate(b) if i not in removed]
    b += [{"id": f"new{i}", "text": t} for i, t in enumerate(texts(records // 50, 2))]
    paths = work / "a.jsonl", work / "b.jsonl"
    for path, rows in zip(paths, (a, b), strict=True):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return paths


def measure(records: int, repository: Path, work: Path) -> None:
    broker = EmbeddedBroker.start(work / "broker.log")
    env = {**os.environ, ENV_BOOTSTRAP: broker.bootstrap_servers, ENV_NAMESPACE: NAMESPACE}
    env[ENV_MODEL_REPOSITORY] = str(repository)
    workers: list[WorkerProcess] = []
    try:
        roles: list[tuple[str, list[str], dict[str, str]]] = [
            ("preprocess", ["preprocess"], PREPROCESS_ENV),
            ("gpu", ["gpu", "--model", MODEL], {}),
        ]
        for name, args, extra in roles:
            workers.append(
                spawn_worker(
                    name,
                    args,
                    bootstrap_servers=broker.bootstrap_servers,
                    namespace=NAMESPACE,
                    repository=repository,
                    log_path=work / f"{name}.log",
                    extra_env=extra,
                )
            )
        submit = [sys.executable, "-m", "jobs.cli", "submit", "--model", MODEL, "--wait"]
        warm = work / "warm.jsonl"
        warm.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts(50, 9)), encoding="utf-8")
        timed_command([*submit, str(warm), "--worker-grace-s", str(WARM_UP_GRACE_S)], env)
        pids = {"preprocess worker": workers[0].process.pid, "GPU worker": workers[1].process.pid, "broker": broker.pid}
        a_file, b_file = inputs(records, work)
        figures: dict[str, tuple[float, float]] = {}
        for job, path, options in (("A", a_file, []), ("B", b_file, []), ("C (B, --no-reuse)", b_file, ["--no-reuse"])):
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            done = timed_command([*submit, str(path), *options], env)
            cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
            cpu["nearline submit --wait"] = done.cpu_s
            figures[job] = (done.wall_s, sum(cpu.values()))
            shown = ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu.items())
            print(f"  job {job}: {done.wall_s:.1f} s wall, {sum(cpu.values()):.1f} CPU s ({shown})", flush=True)
    finally:
        stop_all(workers)
        broker.stop()
    a_wall, a_cpu = figures["A"]
    for job in ("B", "C (B, --no-reuse)"):
        wall, spent = figures[job]
        print(f"  job {job} against A: CPU {spent / a_cpu:.1%}, wall {wall / a_wall:.1%}")


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--model-repository", type=Path, default=None)
    args = parser.parse_args()
    precompile(Path(__file__).resolve().parents[1])
    repository = args.model_repository or Path(os.environ.get(ENV_MODEL_REPOSITORY) or default_repository())
    ensure_model(repository, MODEL, print)
    print(f"bench.reuse_jobs: {args.records:,} texts, {MODEL}, machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="nearline-reuse-jobs-") as tmp:
        measure(args.records, repository, Path(tmp))


if __name__ == "__main__":
    main()
