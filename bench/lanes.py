"""Benchmark: priority lanes. How long does a live job wait behind a backfill?

    .venv/bin/python -m bench.lanes [--backfill 4000] [--live 20] [--flood 4000] [--window 15]

Starts the embedded broker, a preprocess worker and a MiniLM GPU worker (ONNX Runtime on this
CPU: the engine a backfill saturates here; `--bulk-share` left at its default), then prints:
1. a 20-record live job's `nearline submit --priority live --wait` time on idle workers;
2. the same while a backfill of --backfill texts (a batch job) runs, with how much of the backfill
   was still outstanding when the live job completed;
3. with a live job of --flood texts queued (live traffic faster than the engine serves: the live
   lane never runs dry), the achieved batch share over --window seconds: of the engine's time, as
   the GPU worker's nearline_lane_engine_seconds_total says (what --bulk-share guards), and of the
   records done; valid only while both jobs still had records outstanding at the end, which it says;
4. the backfill's completion time and whether every record came back exactly once (`nearline
   results`: one line per record id, the ids the input had).
Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.decoupling import exit_on_sigterm, machine
from bench.feed import short_texts
from bench.small_job import local_pipeline
from gpu_consumer.lanes import DEFAULT_BULK_SHARE
from jobs.launch.runner import ensure_model
from jobs.registry import job_status
from kafka_io.broker import free_port
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from model_repository.folders import default_repository

CLI = [sys.executable, "-m", "jobs.cli"]


def write_texts(path: Path, texts: list[str], prefix: str) -> Path:
    path.write_text("".join(json.dumps({"id": f"{prefix}{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


def submit(env: dict[str, str], source: Path, job_id: str, *extra: str) -> float:
    """Seconds `nearline submit` took (with --wait among `extra`: until the job completed)."""
    started = time.perf_counter()
    cmd = [*CLI, "submit", str(source), "--model", "minilm", "--job-id", job_id, *extra]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=1800)
    return time.perf_counter() - started


def done(settings: KafkaSettings, topics: Topics, job_id: str) -> int:
    return job_status(settings, topics, job_id).done


def lane_engine_seconds(port: int) -> dict[str, float]:
    """The GPU worker's engine seconds per lane, from its /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    found = re.findall(r'^nearline_lane_engine_seconds_total\{[^}]*lane="(\w+)"[^}]*\} (\S+)$', text, re.MULTILINE)
    return {lane: float(value) for lane, value in found}


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backfill", type=int, default=4000, help="texts in the backfill (batch) job")
    parser.add_argument("--live", type=int, default=20, help="records per live job")
    parser.add_argument("--flood", type=int, default=4000, help="texts in the live job that floods the live lane")
    parser.add_argument("--window", type=float, default=15.0, help="seconds the share is measured over")
    parser.add_argument("--model-repository", type=Path, default=default_repository())
    args = parser.parse_args()
    repository = args.model_repository.resolve()
    ensure_model(repository, "minilm", print)
    topics = Topics("lanes")
    with tempfile.TemporaryDirectory(prefix="nearline-lanes-") as tmp:
        work = Path(tmp)
        port = free_port()
        with local_pipeline(work, topics.namespace, repository, ("--metrics-port", str(port))) as (pipeline, env):
            settings = KafkaSettings(pipeline.broker.bootstrap_servers)
            live = write_texts(work / "live.jsonl", short_texts(args.live), "q")
            submit(env, live, "warm-up", "--wait", "--priority", "live")
            idle = submit(env, live, "live-idle", "--wait", "--priority", "live")
            print(f"live job of {args.live} on idle workers: submit --wait {idle:.2f} s", flush=True)

            backfill = write_texts(work / "backfill.jsonl", short_texts(args.backfill), "b")
            started = time.perf_counter()
            submit(env, backfill, "backfill")
            time.sleep(3.0)  # the backfill under way: preprocessed and queued in front of the engine
            busy = submit(env, live, "live-busy", "--wait", "--priority", "live")
            left = args.backfill - done(settings, topics, "backfill")
            print(
                f"live job of {args.live} during the backfill: submit --wait {busy:.2f} s "
                f"({left} of {args.backfill} backfill records still outstanding when it completed)",
                flush=True,
            )

            flood = write_texts(work / "flood.jsonl", short_texts(args.flood), "f")
            submit(env, flood, "live-flood", "--priority", "live")
            time.sleep(2.0)  # the flood preprocessed ahead of the engine: the live lane is never empty
            batch_before, live_before = done(settings, topics, "backfill"), done(settings, topics, "live-flood")
            engine_before = lane_engine_seconds(port)
            time.sleep(args.window)
            engine_after = lane_engine_seconds(port)
            batch_after, live_after = done(settings, topics, "backfill"), done(settings, topics, "live-flood")
            batch_done, live_done = batch_after - batch_before, live_after - live_before
            share = batch_done / max(1, batch_done + live_done)
            engine = {lane: engine_after[lane] - engine_before[lane] for lane in engine_after}
            time_share = engine["bulk"] / max(1e-9, sum(engine.values()))
            valid = batch_after < args.backfill and live_after < args.flood
            print(
                f"live lane flooded ({args.flood} live texts queued), over {args.window:.0f} s: {live_done} live "
                f"and {batch_done} backfill records done; batch share {time_share:.1%} of engine time "
                f"({engine['bulk']:.1f} of {sum(engine.values()):.1f} s; --bulk-share {DEFAULT_BULK_SHARE:g}), "
                f"{share:.1%} of records"
                + ("" if valid else "; INVALID: a lane ran dry before the window ended, use larger jobs"),
                flush=True,
            )

            while done(settings, topics, "backfill") < args.backfill:
                time.sleep(1.0)
            took = time.perf_counter() - started
            out = work / "backfill-results.jsonl"
            subprocess.run([*CLI, "results", "backfill", "-o", str(out)], env=env, check=True, capture_output=True)
            ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
            exact = sorted(ids) == sorted(f"b{i}" for i in range(args.backfill))
            print(
                f"backfill of {args.backfill}: completed in {took:.0f} s beside the live jobs; "
                f"{len(ids)} results, every record exactly once: {exact}",
                flush=True,
            )
    print(f"machine: {machine()}; engine: MiniLM on ONNX Runtime, CPU")


if __name__ == "__main__":
    main()
