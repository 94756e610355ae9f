"""Benchmark: does the GPU worker keep an accelerator fed? Only the engine is replaced.

    .venv/bin/python -m bench.feed [--records 8000] [--rates 0 12000 5000] [--per-call-ms 0.5]
                                   [--processes 2] [--exactly-once] [--metrics-port 9464 [--alternate]]

Fills tensors.minilm once with real preprocessed records: short texts (sentences of the shipped
Python-docs example) submitted to the embedded broker and tokenized by the real preprocess worker.
Then, for each engine stand-in, the real GPU worker (gpu_consumer.worker.serve: its loop, topics,
serde, commit rule) drains the topic in this process, its group rewound to the start each time:
- rate 0, zero-cost: `infer` answers at once; the loop's own ceiling;
- rate R, a simulated accelerator of R records/s: each executed batch sleeps per-call + rows / R.
  A sleep releases the GIL and uses no CPU, as a GPU kernel does, and a rate in records/s does
  not depend on how the batches were cut.
--real-engine torch adds a drain by a real engine (on a GPU machine: the accelerator's own busy
fraction). Records/s and engine busy (a simulated device's compute time, or the time the worker waits on a
real engine, over wall time) are timed from the first inference's start to the last inference's end, so
start-up and shutdown are not counted. --metrics-port serves the worker's Prometheus metrics
while it drains, scraped once a second from another process (15 times Prometheus' default
rate), so what metrics cost the loop is measured. Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.decoupling import EXAMPLE, exit_on_sigterm, machine
from bench.feed_engines import SimulatedAccelerator, TimedEngine, stand_ins
from bench.feed_processes import drain_processes, worker_process
from gpu_consumer.batcher import BatchSettings
from gpu_consumer.engines.factory import measure_cost
from gpu_consumer.worker import GpuWorkerSettings, serve
from jobs.job_input import JobInput
from jobs.launch.local import PREPROCESS_ENV, spawn_worker, stop_all
from jobs.launch.runner import ensure_model
from jobs.submit import submit
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import make_consumer
from kafka_io.offsets import end_offsets, reset_group_offsets
from kafka_io.polling import assign_all
from kafka_io.reading import read_topics
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from model_repository.folders import default_repository, load_model_config
from runtime.metrics_endpoint import MetricsEndpoint


def short_texts(n: int) -> list[str]:
    """n sentences of the shipped example, cycled if it has fewer."""
    sentences = [
        s.strip()
        for line in EXAMPLE.read_text(encoding="utf-8").splitlines()
        for s in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"])
        if len(s.strip()) > 10
    ]
    return [sentences[i % len(sentences)] for i in range(n)]


def fill(settings: KafkaSettings, topics: Topics, repository: Path, n: int, workdir: Path) -> None:
    """n real tensor records in tensors.minilm (in packs), written by the real preprocess worker."""
    workload = workdir / "texts.jsonl"
    workload.write_text("".join(json.dumps({"text": t}) + "\n" for t in short_texts(n)), encoding="utf-8")
    pre = spawn_worker(
        "preprocess",
        ["preprocess"],
        bootstrap_servers=settings.bootstrap_servers,
        namespace=topics.namespace,
        repository=repository,
        log_path=workdir / "preprocess.log",
        extra_env=PREPROCESS_ENV,
    )
    try:
        submit(settings, topics, JobInput(workload, "text"), "minilm")
        deadline = time.monotonic() + 600
        # tensor packs: a Kafka record holds its `records` header's count
        while sum(r.records for r in read_topics(settings, [topics.tensors("minilm")])) < n:
            pre.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the preprocess worker did not write {n} tensor records in 600 s")
            time.sleep(1.0)
    finally:
        stop_all([pre])


def drain(
    settings: KafkaSettings,
    topics: Topics,
    repository: Path,
    engine: TimedEngine,
    exactly_once: bool = False,
    metrics_port: int | None = None,
) -> dict[str, float | str]:
    tensors = topics.tensors("minilm")
    reset_group_offsets(settings, topics.gpu_group("minilm"), {(tensors, p): 0 for p in end_offsets(settings, tensors)})
    # the worker's own cost probes, taken here on the bare engine so they are not timed as work
    policy = BatchSettings(
        engine.max_batch_size, cost=measure_cost(engine.inner, load_model_config(repository, "minilm"))
    )
    if isinstance(engine.inner, SimulatedAccelerator):
        engine.inner.device_s = 0.0  # nor counted as the device's busy time
    stats = serve(
        settings,
        topics,
        repository,
        GpuWorkerSettings(
            "minilm",
            drain=True,
            exactly_once=exactly_once,
            metrics=MetricsEndpoint(metrics_port) if metrics_port else None,
        ),
        policy,
        engine,
    )
    if not engine.sizes:
        raise RuntimeError(f"the worker drained {stats.records} records of {tensors} without one inference")
    wall = engine.last_end - engine.first_start
    calls = sum(engine.sizes.values())
    return {
        "engine": engine.label + (", EOS" if exactly_once else "") + (", metrics" if metrics_port else ""),
        "records": stats.records,
        "records_per_s": stats.records / wall,
        # a simulated accelerator's own compute time; a real engine's is the wait on it
        "engine_busy": getattr(engine.inner, "device_s", engine.busy_s) / wall,
        "executed_batches": calls,
        "mean_batch": stats.records / calls,
        "batch_sizes": json.dumps(dict(sorted(engine.sizes.items()))),
    }


SCRAPER = """
import sys, time, urllib.request
while True:
    time.sleep(float(sys.argv[2]))
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read()
    except OSError:
        pass  # not serving yet: the first drain starts the endpoint
"""


def start_scraper(port: int, every_s: float = 1.0) -> subprocess.Popen[bytes]:
    """GET /metrics every `every_s` from another process, as Prometheus would (more often): the
    worker pays for serving the scrape, not for making it."""
    return subprocess.Popen([sys.executable, "-c", SCRAPER, str(port), str(every_s)])


def fetch_rate(settings: KafkaSettings, topic: str) -> dict[str, float]:
    """How fast a plain consumer (the workers' settings) reads `topic`, first record to last: what
    the broker serves with the record batches the preprocess worker wrote. Timed to the last
    record, not to the end-of-partition signal, which comes one empty fetch (fetch.wait.max.ms) later."""
    ends = end_offsets(settings, topic)
    consumer = make_consumer(settings, f"feed-fetch-{time.monotonic_ns()}")
    assign_all(consumer, topic, sorted(ends))
    records, size, first, last = 0, 0, 0.0, 0.0
    try:
        while records < sum(ends.values()):
            # a short timeout: consume() waits for all of num_messages, which the last call never gets
            for msg in consumer.consume(500, 0.05):
                if msg.error() is None:
                    first = first or time.perf_counter()
                    records, size, last = records + 1, size + len(msg.value() or b""), time.perf_counter()
    finally:
        consumer.close()
    wall = last - first
    return {"records": records, "records_per_s": records / wall, "mb_per_s": size / wall / 1e6}


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=8000)
    parser.add_argument("--rates", type=float, nargs="+", default=[0, 12000, 5000], help="records/s; 0 = zero-cost")
    parser.add_argument("--per-call-ms", type=float, default=0.5)
    parser.add_argument("--real-engine", nargs="*", default=[], help="also drain with these engines (e.g. torch)")
    parser.add_argument("--model-repository", type=Path, default=default_repository())
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--processes", type=int, nargs="*", default=[], help="also drain with this many worker processes (e.g. 2)"
    )
    parser.add_argument(
        "--exactly-once", action="store_true", help="also drain each single-process stand-in in --exactly-once mode"
    )
    parser.add_argument(
        "--metrics-port", type=int, help="serve the drains' Prometheus metrics here, scraped every second"
    )
    parser.add_argument(
        "--alternate",
        action="store_true",
        help="with --metrics-port: every other stand-in drains without metrics (and unscraped), starting with "
        "the first; list each rate twice (--rates 12000 12000 12000 12000) for off/on pairs in one process",
    )
    parser.add_argument("--worker-process", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_process:
        worker_process(json.loads(args.worker_process))
        return

    config = ensure_model(args.model_repository, "minilm", print)
    scraper = start_scraper(args.metrics_port) if args.metrics_port else None
    rows = []
    with tempfile.TemporaryDirectory(prefix="nearline-feed-") as tmp:
        broker = EmbeddedBroker.start(Path(tmp) / "broker.log")
        try:
            settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("feed")
            started = time.perf_counter()
            fill(settings, topics, args.model_repository, args.records, Path(tmp))
            filled = time.perf_counter() - started
            fetched = fetch_rate(settings, topics.tensors("minilm"))
            print(
                f"tensor topic: {args.records} records preprocessed in {filled:.1f} s; a plain consumer reads "
                f"them at {fetched['records_per_s']:,.0f} records/s ({fetched['mb_per_s']:.1f} MB/s)",
                flush=True,
            )
            for i, engine in enumerate(stand_ins(config, args.rates, args.per_call_ms / 1000, args.real_engine)):
                metrics_port = None if args.alternate and i % 2 == 0 else args.metrics_port
                if scraper is not None:  # an unscraped endpoint costs nothing: off drains are not scraped
                    scraper.send_signal(signal.SIGCONT if metrics_port else signal.SIGSTOP)
                for exactly_once in (False, True) if args.exactly_once else (False,):
                    rows.append(drain(settings, topics, args.model_repository, engine, exactly_once, metrics_port))
                    print(json.dumps(rows[-1]), flush=True)
            for n in args.processes:
                for rate in args.rates:
                    rows.append(
                        drain_processes(settings, topics, args.model_repository, n, rate, args.per_call_ms / 1000)
                    )
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            broker.stop()
            if scraper is not None:
                scraper.send_signal(signal.SIGCONT)
                scraper.terminate()

    print(f"\nmachine: {machine()}")
    print(f"workload: {args.records} short texts as minilm tensor records; per call {args.per_call_ms} ms")
    print(f"{'engine':<42}{'rec/s':>9}{'busy':>7}{'batches':>9}{'mean batch':>12}")
    for r in rows:
        print(
            f"{r['engine']:<42}{r['records_per_s']:>9,.0f}{r['engine_busy']:>7.0%}"
            f"{r['executed_batches']:>9}{r['mean_batch']:>12.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "figures": rows}, indent=2))


if __name__ == "__main__":
    main()
