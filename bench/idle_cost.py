"""Benchmark: what a warm, idle pipeline costs the machine.

    .venv/bin/python -m bench.idle_cost [--seconds 10]

Starts the embedded broker, a preprocess worker and a MiniLM GPU worker, runs one small job so
every client is connected and every partition assigned, then reads each process's CPU time and
each thread's wake-ups (voluntary context switches, from /proc) over --seconds of nothing to do.
On a one-host pipeline whatever the idle parts burn is taken from the engine's cores. Figures,
never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.decoupling import exit_on_sigterm, machine
from bench.feed import short_texts
from bench.procfs import cpu_seconds, status_field, task_dir
from bench.small_job import local_pipeline
from jobs.launch.runner import ensure_model
from model_repository.folders import default_repository


@dataclass(frozen=True)
class ThreadSample:
    name: str
    cpu_s: float
    wakeups: int


def threads_of(pid: int) -> dict[int, ThreadSample]:
    out = {}
    for tid in map(int, os.listdir(f"/proc/{pid}/task")):
        try:
            name = (task_dir(pid, tid) / "comm").read_text().strip()
            out[tid] = ThreadSample(name, cpu_seconds(pid, tid), status_field(pid, "voluntary_ctxt_switches", tid))
        except OSError:  # the thread ended between listing and reading
            continue
    return out


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--model-repository", type=Path, default=default_repository())
    args = parser.parse_args()
    repository = args.model_repository.resolve()
    ensure_model(repository, "minilm", print)
    with tempfile.TemporaryDirectory(prefix="nearline-idle-") as tmp:
        work = Path(tmp)
        with local_pipeline(work, "idle", repository) as (pipeline, env):
            source = work / "warm-up.jsonl"
            source.write_text("".join(json.dumps({"text": t}) + "\n" for t in short_texts(20)), encoding="utf-8")
            cli = [sys.executable, "-m", "jobs.cli", "submit", str(source), "--model", "minilm", "--wait"]
            subprocess.run(cli, env=env, check=True, capture_output=True, timeout=300)
            time.sleep(3)  # the job's last commits and progress reports are done
            pids = {
                "broker": pipeline.broker.pid,
                "preprocess worker": pipeline.preprocess.process.pid,
                "GPU worker": pipeline.gpu.process.pid,
            }
            before = {name: threads_of(pid) for name, pid in pids.items()}
            started = time.monotonic()
            time.sleep(args.seconds)
            after = {name: threads_of(pid) for name, pid in pids.items()}
            seconds = time.monotonic() - started
    print(f"machine: {machine()}; {seconds:.1f} s idle after a warm-up job")
    print(f"{'process':<20}{'% of a core':>12}{'wake-ups/s':>12}   busiest thread")
    for name in pids:
        cpu = wakeups = 0.0
        busiest = ("", 0.0)
        for tid, end in after[name].items():
            start = before[name].get(tid, ThreadSample(end.name, 0.0, 0))
            cpu += end.cpu_s - start.cpu_s
            wakeups += end.wakeups - start.wakeups
            if end.wakeups - start.wakeups > busiest[1]:
                busiest = (end.name, end.wakeups - start.wakeups)
        top = f"{busiest[0]} ({busiest[1] / seconds:.0f}/s)"
        print(f"{name:<20}{100 * cpu / seconds:>11.1f}%{wakeups / seconds:>12.0f}   {top}")


if __name__ == "__main__":
    main()
