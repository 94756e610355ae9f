"""Benchmark: what keeping `nearline run`'s results cache between runs costs (jobs/launch/kept_cache.py).

    .venv/bin/python -m bench.kept_cache [--results 30000 300000] [--value-bytes 1550]

For each --results count, on a fresh embedded broker: that many results (random bytes the size of
a MiniLM result, random 32-byte keys) produced to cache.<model> as a GPU worker would, then
`keep_cache` (read the topic to its end, write the file: what the end of a run adds) and
`restore_cache` into another namespace (what the start of the next run adds), each timed: wall
seconds, microseconds a result, this process's CPU, the broker's CPU, and the file's size. Against
a run's own cost a record (bench.system_cost: ~190 us of CPU over all processes for a short text
with a free engine, ~6 ms for MiniLM on this CPU). Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.decoupling import machine
from bench.procfs import cpu_seconds
from jobs.launch.kept_cache import ENV_RESULTS_CACHE, keep_cache, kept_file, restore_cache
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord
from kafka_io.result_cache import cache_topic
from kafka_io.settings import KafkaSettings
from kafka_io.topics import ensure_topics
from kafka_io.topology import Topics

MODEL = "minilm"


def timed(broker_pid: int, work: Callable[[], object]) -> tuple[float, float, float]:
    """(wall s, this process's CPU s, the broker's CPU s) of work()."""
    wall, cpu, broker = time.perf_counter(), time.process_time(), cpu_seconds(broker_pid)
    work()
    return time.perf_counter() - wall, time.process_time() - cpu, cpu_seconds(broker_pid) - broker


def measure(results: int, value_bytes: int, work: Path) -> None:
    broker = EmbeddedBroker.start(work / f"broker-{results}.log")
    try:
        settings, topics = KafkaSettings(broker.bootstrap_servers), Topics(f"bench{results}")
        spec = cache_topic(topics, MODEL)
        ensure_topics(settings, [spec])
        value = os.urandom(value_bytes)  # one value: its bytes are not what is measured
        produce_all(make_producer(settings), (OutRecord(spec.name, value, os.urandom(32)) for _ in range(results)))
        said: list[str] = []
        kept = timed(broker.pid, lambda: keep_cache(settings, topics, MODEL, said.append))
        size = kept_file(MODEL).stat().st_size
        later = Topics(f"later{results}")
        restored = timed(broker.pid, lambda: restore_cache(settings, later, MODEL, said.append))
        print(f"{results:,} results of {value_bytes:,} bytes, a kept file of {size / 2**20:,.0f} MiB; {said[-1]}")
        for name, (wall, cpu, broker_cpu) in (
            ("keep (a run's end)", kept),
            ("restore (the next run's start)", restored),
        ):
            per = 1e6 / results
            print(
                f"  {name:32} {wall:6.2f} s wall, {wall * per:5.1f} us a result; CPU: this process "
                f"{cpu * per:5.1f} us, the broker {broker_cpu * per:5.1f} us a result"
            )
    finally:
        broker.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=int, nargs="+", default=[30000, 300000])
    parser.add_argument("--value-bytes", type=int, default=1550)  # a MiniLM result: 384 floats and its fields
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nearline-kept-bench-") as tmp:
        os.environ[ENV_RESULTS_CACHE] = str(Path(tmp) / "kept")
        for results in args.results:
            measure(results, args.value_bytes, Path(tmp))
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
