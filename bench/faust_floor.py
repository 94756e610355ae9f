"""Benchmark: what faust itself costs per event, the floor under the preprocess worker's CPU per record.

    .venv/bin/python -m bench.faust_floor [--records 30000] [--agents bare take] [--pack K]

Fills a topic of the embedded broker with --records records the size of a short text's raw record
(key, job headers, 200 bytes), then for each agent runs a faust worker with the preprocess app's
settings and measures the CPU the worker process used from its first event to its last:
- bare: `async for event in stream`, faust's own acks: faust's consumer, conductor and stream;
- take: the preprocess worker's grouping (preprocess_app/faust_patches.py: tick_take) and an ack per event, with
  nothing done to the events: the preprocess worker without its step and its producer;
- eager: take, with faust's message loop starting each callback at once
  (preprocess_app/faust_patches.py: drain_eagerly);
- consumer: eager, with each message acked as its conductor callback gets it, and no event,
  channel or stream made: what faust's consumer and aiokafka alone cost, the floor under a
  hand-over of each fetch in bulk.
--pack K writes records/K records of K times the size instead, as if K texts travelled in one
Kafka record (what nearline's packs do for text since; schemas/packs.py), and prints the cost
per text too, the worker's and the broker's while it served them: the figures that made the case
for packs (bench/HISTORY.md).
Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.decoupling import exit_on_sigterm, machine
from bench.procfs import cpu_seconds
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import job_record
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics

TOPIC = "floor.raw"
AGENTS = ["bare", "take", "eager", "consumer"]


def worker_main(bootstrap: str, agent: str, records: int, out: Path, broker_pid: int) -> None:
    """A faust worker with the preprocess app's settings whose one agent does nothing per event."""
    import faust

    from preprocess_app.app import TablelessManager, prompt_fetches
    from preprocess_app.faust_patches import drain_eagerly, tick_take

    exit_on_sigterm()
    prompt_fetches()
    with tempfile.TemporaryDirectory(prefix="nearline-floor-") as datadir:
        app = faust.App(
            f"floor-{agent}-{os.getpid()}",
            broker=f"kafka://{bootstrap}",
            value_serializer="raw",
            key_serializer="raw",
            broker_session_timeout=6.0,
            broker_heartbeat_interval=1.0,
            consumer_auto_offset_reset="earliest",
            topic_allow_declare=False,
            topic_disable_leader=True,
            web_enabled=False,
            TableManager=TablelessManager,
            datadir=datadir,
        )
        if agent in ("eager", "consumer"):
            drain_eagerly(app)
        seen = [0]
        started = [0.0, 0.0]  # this worker's CPU and the broker's, at the first event

        def count(n: int) -> None:
            if not seen[0]:
                started[:] = [time.process_time(), cpu_seconds(broker_pid)]
            seen[0] += n
            if seen[0] >= records:
                worker_s, broker_s = time.process_time() - started[0], cpu_seconds(broker_pid) - started[1]
                out.write_text(f"{worker_s} {broker_s} {seen[0]}")
                os._exit(0)

        if agent == "consumer":

            def build(conductor: Any, tp: Any, channels: Any) -> Any:
                async def on_message(message: Any) -> None:
                    app.consumer.ack(message)
                    count(1)

                return on_message

            app.topics._compiler.build = build  # type: ignore[attr-defined]

        @app.agent(app.topic(TOPIC, value_serializer="raw", key_serializer="raw"))
        async def floor(stream: Any) -> None:
            if agent == "bare":
                async for _ in stream:
                    count(1)
                return
            async for events in tick_take(stream, 64, 0.02):
                for event in events:
                    await stream.ack(event)
                count(len(events))

        worker = faust.Worker(app, loglevel="WARNING", quiet=True)
        worker.spinner = None
        worker.execute_from_commandline()


def measure(broker: EmbeddedBroker, agent: str, records: int, work: Path) -> tuple[float, float]:
    """(the worker's CPU us an event, the broker's CPU us an event meanwhile), both from the first
    event to the last: not the worker's start-up and group join."""
    out = work / f"{agent}.txt"
    argv = [
        sys.executable,
        "-m",
        "bench.faust_floor",
        "--worker",
        broker.bootstrap_servers,
        agent,
        str(records),
        str(out),
        str(broker.pid),
    ]
    subprocess.run(argv, check=True, timeout=600)
    cpu_s, broker_s, seen = out.read_text().split()
    return float(cpu_s) / int(seen) * 1e6, float(broker_s) / int(seen) * 1e6


def main() -> None:
    exit_on_sigterm()
    if sys.argv[1:2] == ["--worker"]:
        bootstrap, agent, records, out, broker_pid = sys.argv[2:7]
        worker_main(bootstrap, agent, int(records), Path(out), int(broker_pid))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=30000)
    parser.add_argument("--agents", nargs="+", choices=AGENTS, default=AGENTS)
    parser.add_argument("--pack", type=int, default=1, help="texts a Kafka record carries (1: as nearline does)")
    args = parser.parse_args()
    events = max(1, args.records // args.pack)
    with tempfile.TemporaryDirectory(prefix="nearline-faust-floor-") as tmp:
        broker = EmbeddedBroker.start(Path(tmp) / "broker.log")
        try:
            settings = KafkaSettings(broker.bootstrap_servers)
            ensure_topics(settings, [TopicSpec(TOPIC)])
            value = b"x" * 200 * args.pack
            written = (job_record(TOPIC, value, "floor-job", f"r{i}", 1_700_000_000_000_000) for i in range(events))
            produce_all(make_producer(settings), written)
            print(f"{events:,} records of {len(value)} bytes, faust worker CPU from its first event to its last:")
            for agent in args.agents:
                worker_us, broker_us = measure(broker, agent, events, Path(tmp))
                line = f"  {agent:8} {worker_us:7.0f} us/event, broker {broker_us:5.0f}"
                if args.pack > 1:
                    line += f"; a text: {worker_us / args.pack:5.2f} us, broker {broker_us / args.pack:5.2f}"
                print(line)
        finally:
            broker.stop()
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
