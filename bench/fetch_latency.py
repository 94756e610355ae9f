"""Benchmark: how soon does an idle consumer see a new record, by fetch.wait.max.ms?

    .venv/bin/python -m bench.fetch_latency [--records 15] [--waits 500 100 20]

On the embedded broker: a consumer with nothing to read holds a fetch open for fetch.wait.max.ms.
A broker that answers a held fetch as soon as records arrive makes that wait free; one that does
not (Tansu, docs/brokers.md) adds up to the whole wait to every hand-over between stages
when the pipeline is idle: a small job's "wait for inference". One record is produced every
~140 ms (never in step with the fetch wait) and timed from produce() to the consumer's poll()
returning it. Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.decoupling import exit_on_sigterm, machine
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import make_consumer, make_producer
from kafka_io.events import take
from kafka_io.polling import assign_all
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics

TOPIC = "fetch-latency"
PARTITIONS = 4


def latencies_ms(settings: KafkaSettings, wait_ms: int, records: int) -> list[float]:
    producer = make_producer(settings, idempotent=False)  # no producer-id wait in the first send
    consumer = make_consumer(settings, f"fetch-latency-{wait_ms}", **{"fetch.wait.max.ms": wait_ms})
    assignment = assign_all(consumer, TOPIC, list(range(PARTITIONS)))
    try:
        settle = time.monotonic() + 1.0  # past the first fetches: the consumer is idle from here
        while time.monotonic() < settle:
            consumer.poll(0.1)
        out = []
        for n in range(records):
            time.sleep(0.137)
            started = time.monotonic()
            producer.produce(TOPIC, b"x", key=str(n).encode())
            producer.poll(0)
            while True:
                msg = consumer.poll(2.0)
                if msg is not None and take(msg, assignment.at_eof) is not None:
                    break
            out.append((time.monotonic() - started) * 1000)
        return out
    finally:
        producer.flush(5)
        consumer.close()


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=15)
    parser.add_argument("--waits", type=int, nargs="+", default=[500, 100, 20], help="fetch.wait.max.ms values")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nearline-fetch-latency-") as tmp:
        broker = EmbeddedBroker.start(Path(tmp) / "broker.log")
        try:
            settings = KafkaSettings(broker.bootstrap_servers)
            ensure_topics(settings, [TopicSpec(TOPIC, partitions=PARTITIONS)])
            print(f"{'fetch.wait.max.ms':>18}{'p50 ms':>9}{'max ms':>9}")
            for wait in args.waits:
                got = latencies_ms(settings, wait, args.records)
                print(f"{wait:>18}{statistics.median(got):>9.0f}{max(got):>9.0f}", flush=True)
        finally:
            broker.stop()
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
