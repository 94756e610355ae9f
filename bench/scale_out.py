"""Benchmark: the same job on 1, 2 and 4 GPU hosts, each with a simulated accelerator. Needs root.

    .venv/bin/python -m bench.scale_out [--hosts 1 2 4] [--records 48000] [--rate 1500]
                                        [--per-call-ms 0.5] [--partitions 8] [--model-repository DIR]

The hosts are network namespaces (bench/hosts.py): the broker in its own host, the GPU hosts on
their own segment behind the switch, a client host. Preprocessing is out of the measurement: from
the client host, --records short texts (sentences of the shipped example) are run through the
preprocess stage's own code (preprocess_app.text.preprocess_texts, the MiniLM tokenizer) and the
tensor records it makes are written to tensors.minilm, created with --partitions partitions, once
for each host count (each run has its own topic namespace, so its own group, offsets and results).

Then, for N hosts, N GPU worker processes, one in each host, run the real worker
(gpu_consumer.worker.serve: group gpu.minilm with Kafka's range assignor, its loop, serde,
commit rule, results produced to the broker) with only the engine replaced by bench.feed_engines'
simulated accelerator: --per-call-ms per executed batch plus rows / --rate, a sleep that releases
the GIL and uses no CPU, as waiting on a GPU does. They warm up, then start together; once the
group has committed every record, they are stopped together. Records/s is every record over the
span from the first inference's start on any host to the last one's end on any host; a host's busy
is its device time over that span. Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from confluent_kafka import TopicPartition

from bench.decoupling import exit_on_sigterm, machine
from bench.feed import short_texts
from bench.feed_engines import SimulatedAccelerator, TimedEngine
from bench.hosts import Layout, Topology, broker_running
from gpu_consumer.batcher import BatchSettings
from gpu_consumer.engines.factory import measure_cost
from gpu_consumer.worker import GpuWorkerSettings, serve
from jobs.launch.runner import ensure_model
from kafka_io.clients import make_consumer, make_producer
from kafka_io.offsets import end_offsets
from kafka_io.produce import produce_all
from kafka_io.records import ConsumedRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import Topics
from model_repository.folders import default_repository, load_model_config
from preprocess_app.models import Models
from preprocess_app.text import preprocess_texts
from schemas import RawText, encode, now_us

MODEL = "minilm"


@dataclass(frozen=True)
class Run:
    """One host count's drain, as the worker processes reported it."""

    hosts: int
    records: int
    wall_s: float
    per_host: list[dict[str, float]]
    broker_cpu_s: float  # the broker host's CPU time from go to the last commit (the join's included)

    @property
    def workers_cpu_s(self) -> float:
        """The worker processes' CPU time from their first inference to their last, together."""
        return sum(h["cpu_s"] for h in self.per_host)

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_s


@dataclass(frozen=True)
class Spec:
    """What the processes run in the hosts are told (as JSON on their command line)."""

    bootstrap: str
    repository: str
    rate: float
    per_call_s: float
    records: int = 0  # the filler's
    partitions: int = 0
    namespaces: tuple[str, ...] = ()
    namespace: str = ""  # a worker's

    def argv(self, role: str) -> list[str]:
        return [sys.executable, "-m", "bench.scale_out", f"--{role}", json.dumps(asdict(self))]

    @classmethod
    def parse(cls, text: str) -> Spec:
        fields = json.loads(text)
        return cls(**{**fields, "namespaces": tuple(fields["namespaces"])})


@dataclass
class CpuTimedEngine(TimedEngine):
    """TimedEngine that also notes the process's CPU time (all its threads) at the first inference
    and after each one: the worker's cost per record, without its start-up and its join."""

    cpu_first: float = 0.0
    cpu_last: float = 0.0

    def infer_many(self, batches: Iterable[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
        self.cpu_first = self.cpu_first or time.process_time()
        for out in super().infer_many(batches):
            self.cpu_last = time.process_time()
            yield out


def namespace(hosts: int) -> str:
    return f"scale{hosts}"


def fill(spec: Spec) -> None:
    """Run in the client host: tensor records of spec.records texts into each run's tensor topic."""
    settings, repository, n = KafkaSettings(spec.bootstrap), Path(spec.repository), spec.records
    first = Topics(spec.namespaces[0])
    models, submitted, out = Models(repository), now_us(), []
    texts = short_texts(n)
    for start in range(0, n, 1000):
        sources = [
            ConsumedRecord(first.raw_text, 0, i, encode(RawText("scale-out", f"r{i}", i, MODEL, texts[i], submitted)))
            for i in range(start, min(n, start + 1000))
        ]
        out += preprocess_texts(sources, models, first)
    if any(r.topic != first.tensors(MODEL) for r in out):
        raise RuntimeError("the preprocess stage dead-lettered some of the benchmark's texts")
    for name in spec.namespaces:
        topics = Topics(name)
        ensure_topics(settings, [TopicSpec(topics.tensors(MODEL), partitions=spec.partitions)])
        produce_all(make_producer(settings), [replace(r, topic=topics.tensors(MODEL)) for r in out])
    print(json.dumps({"records": len(out), "bytes": sum(len(r.value or b"") for r in out)}), flush=True)


def worker(spec: Spec) -> None:
    """One GPU host's worker: warm up, say ready, wait for go, serve() until SIGTERM, report."""
    settings, topics, repository = KafkaSettings(spec.bootstrap), Topics(spec.namespace), Path(spec.repository)
    config = load_model_config(repository, MODEL)
    accelerator = SimulatedAccelerator(config, spec.rate, spec.per_call_s)
    engine = CpuTimedEngine(accelerator, "simulated")
    policy = BatchSettings(engine.max_batch_size, cost=measure_cost(accelerator, config))  # not timed as work
    accelerator.device_s = 0.0
    print("ready", flush=True)
    sys.stdin.readline()
    stats = serve(settings, topics, repository, GpuWorkerSettings(MODEL), policy, engine=engine)  # until SIGTERM
    report = {
        "records": stats.records,
        "first_start": engine.first_start,
        "last_end": engine.last_end,
        "device_s": accelerator.device_s,
        "cpu_s": engine.cpu_last - engine.cpu_first,
        "batches": sum(engine.sizes.values()),
    }
    print(json.dumps(report), flush=True)


def watch(spec: Spec) -> None:
    """Run in the client host: return once the group has committed every record of the topic."""
    settings, topics = KafkaSettings(spec.bootstrap), Topics(spec.namespace)
    tensors = topics.tensors(MODEL)
    ends = end_offsets(settings, tensors)
    consumer = make_consumer(settings, topics.gpu_group(MODEL))  # never subscribes: only asks the coordinator
    try:
        while True:
            committed = consumer.committed([TopicPartition(tensors, p) for p in sorted(ends)], timeout=15)
            if all(tp.offset >= ends[tp.partition] for tp in committed):
                return
            time.sleep(0.5)
    finally:
        consumer.close()


def drain(net: Topology, hosts: int, base: Spec, logs: Path) -> Run:
    """`hosts` GPU worker processes, one per GPU host, started together once all are warm, and
    stopped together once the group has committed every record. Not drain mode, where each worker
    leaves the group as soon as its own partitions are done: with 8 hosts, one drain never ended,
    its last worker left waiting in the group after the others had left one by one (members that
    leave while a Tansu group rebalances can wedge it, docs/brokers.md)."""
    argv = replace(base, namespace=namespace(hosts)).argv("worker")
    processes = []
    for host in net.of_kind("gpu")[:hosts]:
        with (logs / f"{hosts}-{host.name}.log").open("ab") as log:
            pipe = subprocess.PIPE
            processes.append(subprocess.Popen(host.command(*argv), stdin=pipe, stdout=pipe, stderr=log, text=True))
    for p in processes:
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"a GPU worker did not get ready (exit {p.wait()}); see {logs}")
    broker_before = net.cpu_seconds("broker")
    for p in processes:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    watcher = subprocess.Popen(net.host("client").command(*replace(base, namespace=namespace(hosts)).argv("watch")))
    while watcher.poll() is None:
        if any(p.poll() is not None for p in processes):
            watcher.kill()
            raise RuntimeError(f"a GPU worker exited before the end of the run; see {logs}")
        time.sleep(0.2)
    broker_cpu = net.cpu_seconds("broker") - broker_before
    for p in processes:
        p.send_signal(signal.SIGTERM)  # serve() finishes its windows in flight and returns
    reports = []
    for p in processes:
        out, _ = p.communicate(timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"a GPU worker exited with {p.returncode}; see {logs}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    started = min(r["first_start"] for r in reports if r["records"])
    ended = max(r["last_end"] for r in reports if r["records"])
    return Run(hosts, sum(r["records"] for r in reports), ended - started, reports, broker_cpu)


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--records", type=int, default=48_000)
    parser.add_argument("--rate", type=float, default=1500.0, help="each simulated accelerator's records/s")
    parser.add_argument("--per-call-ms", type=float, default=0.5)
    parser.add_argument("--partitions", type=int, default=8, help="of tensors.minilm")
    parser.add_argument("--model-repository", type=Path, default=default_repository())
    parser.add_argument("--fill", help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--watch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fill:
        fill(Spec.parse(args.fill))
        return
    if args.worker:
        worker(Spec.parse(args.worker))
        return
    if args.watch:
        watch(Spec.parse(args.watch))
        return

    ensure_model(args.model_repository, MODEL, print)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="nearline-scale-") as tmp, Topology(Layout(0, max(args.hosts))) as net:
        logs = Path(tmp)
        with broker_running(net, logs / "broker.log"):
            base = Spec(net.bootstrap_servers, str(args.model_repository.resolve()), args.rate, args.per_call_ms / 1000)
            started = time.perf_counter()
            filler = replace(
                base,
                records=args.records,
                partitions=args.partitions,
                namespaces=tuple(namespace(n) for n in args.hosts),
            )
            argv = net.host("client").command(*filler.argv("fill"))
            filled = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
            print(
                f"filled {len(args.hosts)} tensor topics of {args.partitions} partitions with {filled['records']} "
                f"records each ({filled['bytes'] / filled['records']:.0f} B a record) in "
                f"{time.perf_counter() - started:.1f} s",
                flush=True,
            )
            for n in args.hosts:
                runs.append(drain(net, n, base, logs))
                print(json.dumps({"hosts": n, "records_per_s": runs[-1].records_per_s, **vars(runs[-1])}), flush=True)
    report(runs, args)


def report(runs: list[Run], args: argparse.Namespace) -> None:
    ceiling = 64 / (args.per_call_ms / 1000 + 64 / args.rate)
    print(f"\nmachine: {machine()}")
    print(
        f"workload: {args.records} MiniLM tensor records in {args.partitions} partitions; each GPU host a "
        f"simulated accelerator of {args.rate:,.0f} records/s + {args.per_call_ms} ms a call "
        f"({ceiling:,.0f} records/s at batch 64)"
    )
    base = runs[0].records_per_s if runs else 1.0
    print(
        f"{'hosts':>5}{'records':>9}{'wall s':>8}{'rec/s':>9}{'speed-up':>10}{'CPU us/rec: broker':>20}"
        f"{'workers':>9}{'cores':>7}   per host: records/s (busy)"
    )
    for run in runs:
        hosts = "  ".join(f"{h['records'] / run.wall_s:,.0f} ({h['device_s'] / run.wall_s:.0%})" for h in run.per_host)
        speed_up = run.records_per_s / base
        broker, workers = run.broker_cpu_s / run.records * 1e6, run.workers_cpu_s / run.records * 1e6
        cores = (broker + workers) * run.records_per_s / 1e6  # at the run's rate
        print(
            f"{run.hosts:>5}{run.records:>9}{run.wall_s:>8.1f}{run.records_per_s:>9,.0f}{speed_up:>9.2f}x"
            f"{broker:>20.0f}{workers:>9.0f}{cores:>7.2f}   {hosts}"
        )
    print(
        "CPU us/rec: CPU time per record of the broker host (from go to the last commit) and of the GPU worker "
        "processes together (from each one's first inference to its last); cores: what that costs at the run's "
        "records/s"
    )


if __name__ == "__main__":
    main()
