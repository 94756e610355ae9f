"""Benchmark: what one short text costs the preprocess worker, in CPU time.

    .venv/bin/python -m bench.preprocess_cost [--records 8000]

Starts the embedded broker and a real preprocess worker (with its Prometheus endpoint), warms it
with a 50-record job, then submits --records short texts and waits until their tensor records are
in tensors.minilm. Prints the worker process's CPU time per record (from /proc: everything it
did, faust and aiokafka included) and the time inside the preprocessing step (tokenize and
encode, from nearline_preprocess_seconds). Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.decoupling import exit_on_sigterm, machine
from bench.feed import short_texts
from bench.procfs import cpu_seconds
from jobs.launch.local import PREPROCESS_ENV, spawn_worker, stop_all
from kafka_io.broker import EmbeddedBroker
from kafka_io.reading import TopicFollower
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topology import ENV_NAMESPACE, Topics
from model_repository.folders import ENV_MODEL_REPOSITORY, default_repository

NAMESPACE = "preprocess-cost"


def step_seconds(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(v) for v in re.findall(r"^nearline_preprocess_seconds_sum\{[^}]*\} (\S+)$", text, re.M))


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=8000)
    parser.add_argument("--metrics-port", type=int, default=9477)
    args = parser.parse_args()
    repository = default_repository()
    with tempfile.TemporaryDirectory(prefix="nearline-preprocess-cost-") as tmp:
        work = Path(tmp)
        broker = EmbeddedBroker.start(work / "broker.log")
        env = {**os.environ, ENV_BOOTSTRAP: broker.bootstrap_servers, ENV_NAMESPACE: NAMESPACE}
        env[ENV_MODEL_REPOSITORY] = str(repository)
        worker = spawn_worker(
            "preprocess",
            ["preprocess", "--metrics-port", str(args.metrics_port)],
            log_path=work / "preprocess.log",
            extra_env=PREPROCESS_ENV,
            bootstrap_servers=broker.bootstrap_servers,
            namespace=NAMESPACE,
            repository=repository,
        )
        settings, topics = KafkaSettings(broker.bootstrap_servers), Topics(NAMESPACE)
        try:
            expected = 0
            for job, count in (("warm-up", 50), ("measured", args.records)):
                source = work / f"{job}.jsonl"
                source.write_text("".join(json.dumps({"text": t}) + "\n" for t in short_texts(count)))
                cpu0 = cpu_seconds(worker.process.pid)
                step0 = step_seconds(args.metrics_port) if job == "measured" else 0.0
                started = time.monotonic()
                subprocess.run(
                    [sys.executable, "-m", "jobs.cli", "submit", str(source), "--model", "minilm", "--job-id", job],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                expected += count
                follower = TopicFollower(settings, [topics.tensors("minilm")])
                try:
                    seen = 0
                    while seen < expected:
                        worker.check_alive()
                        seen += len(follower.poll(1.0))
                finally:
                    follower.close()
                if job == "measured":
                    wall = time.monotonic() - started
                    cpu = cpu_seconds(worker.process.pid) - cpu0
                    step = step_seconds(args.metrics_port) - step0
                    print(
                        f"{count} short texts in {wall:.2f} s: the preprocess worker used {cpu:.2f} CPU-seconds, "
                        f"{cpu / count * 1e6:.0f} us a record; inside the step {step / count * 1e6:.0f} us a record"
                    )
        finally:
            stop_all([worker])
            broker.stop()
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
