"""The pipelined worker loop against the real broker: windows in flight at a rebalance are finished
and committed before their partitions go, so the new owner starts after them."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import numpy as np

from gpu_consumer.batcher import BatchSettings
from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
from gpu_consumer.pipeline import PipelineSettings
from gpu_consumer.steps import Inference
from gpu_consumer.windows import WindowSettings
from gpu_consumer.worker import LoopSettings, WorkerStats, run
from kafka_io.clients import make_consumer, make_producer
from kafka_io.polling import subscribe
from kafka_io.reading import read_topics
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from schemas import InferenceResult, decode
from tests.support.pipeline import feed_tensors
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until


class SlowEngine(OnnxRuntimeEngine):
    """The tiny model, with a device that takes 300 ms a batch: eight windows in flight
    hold ~10 s of work, longer than the rebalance takes."""

    calls = 0

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        time.sleep(0.3)
        self.calls += 1
        return super().infer(inputs)


def test_windows_in_flight_at_a_rebalance_are_finished_and_committed_before_the_partitions_move(
    settings: KafkaSettings, topics: Topics, tiny: TinyModel
) -> None:
    total = 640
    feed_tensors(settings, topics, "job-rb", total)
    stats: dict[str, WorkerStats] = {}
    done = threading.Event()

    def results() -> set[str]:
        return {(m.key or b"").decode() for m in read_topics(settings, [topics.results])}

    engines = {name: SlowEngine(tiny.config, threads=1) for name in "ab"}

    def worker(name: str) -> None:
        consumer = make_consumer(settings.with_client_id(name), topics.gpu_group("tiny"))
        assignment = subscribe(consumer, [topics.tensors("tiny")])
        try:
            stats[name] = run(
                consumer,
                assignment,
                lambda: make_producer(settings),
                Inference(engines[name], tiny.config, topics, BatchSettings(8), name),
                WindowSettings(32, 20.0),
                # not drain: a worker that leaves while the other joins can wedge a Tansu group
                # (docs/brokers.md); both stop once every record has its result
                LoopSettings(should_stop=done.is_set, pipeline=PipelineSettings(max_in_flight=8)),
            )
        finally:
            consumer.close()

    first = threading.Thread(target=worker, args=("a",))
    second = threading.Thread(target=worker, args=("b",))
    first.start()
    try:  # done set whatever happens: the workers' threads stop only then
        wait_until(  # a is under way, its windows in flight
            lambda: engines["a"].calls, 60, "worker a's first 4 batches", until=lambda calls: calls >= 4, every_s=0.2
        )
        second.start()
        wait_until(lambda: len(results()), 120, f"all {total} results", until=lambda n: n >= total, every_s=0.5)
    finally:
        done.set()
    first.join(60)
    second.join(60)
    assert not first.is_alive() and not second.is_alive()

    by_record: dict[str, set[str]] = defaultdict(set)
    partition_of: dict[str, int] = {}
    for msg in read_topics(settings, [topics.results]):
        result = decode(msg.value or b"", InferenceResult)
        by_record[result.record_id].add(result.batch_id.split("-")[0])
    for msg in read_topics(settings, [topics.tensors("tiny")]):
        partition_of[(msg.key or b"").decode().split("/")[1]] = msg.partition or 0
    assert set(by_record) == {f"r{i}" for i in range(total)}  # nothing lost
    assert stats["a"].records + stats["b"].records >= total
    assert "b" in {w for workers in by_record.values() for w in workers}, f"the rebalance came too late: {stats}"
    # A record that both workers ran would mean b started before a's commit of it.
    both = sorted(r for r, workers in by_record.items() if workers == {"a", "b"})
    assert both == [], f"run by both workers: {both[:10]} (partitions {sorted({partition_of[r] for r in both})})"
