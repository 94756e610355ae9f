"""The GPU worker loop: poll a batch, run it, store every output, then commit. The commit rule:

    for batch in batches(...):                   # up to max_batch_size records or max_linger_ms
        produce_all(producer, handle_batch(...)) # waits for every delivery report
        commit_batch(consumer, batch)            # offsets move only after outputs are stored

A crash anywhere before the commit means the batch is consumed again: at-least-once, and
results are keyed by job/record so readers drop the duplicates.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from gpu_consumer.batcher import BatchPolicy
from gpu_consumer.engine import Engine, make_engine
from gpu_consumer.handler import handle_batch
from gpu_consumer.postprocess import STEPS
from kafka_io import Consumer, KafkaException, Producer
from kafka_io.cancellations import Cancellations, job_of
from kafka_io.clients import check_reachable, make_consumer, make_producer
from kafka_io.errors import DeliveryError
from kafka_io.polling import Assignment, BatchLimits, batches, commit_batch, source_of, subscribe
from kafka_io.produce import produce_all
from kafka_io.settings import KafkaSettings, Topics
from kafka_io.topics import TopicSpec, ensure_topics, jobs_topic
from kafka_io.transactions import TransactionAbortedError, commit_in_transaction, make_transactional_producer
from schemas.model_config import ModelConfig, load_model_config

log = logging.getLogger(__name__)
# A batch's deliveries normally confirm in milliseconds; this long means the broker is gone.
DELIVERY_TIMEOUT_S = 30.0


@dataclass
class WorkerStats:
    batches: int = 0
    records: int = 0


def run(
    consumer: Consumer,
    assignment: Assignment,
    new_producer: Callable[[], Producer],
    engine: Engine,
    config: ModelConfig,
    topics: Topics,
    limits: BatchLimits,
    policy: BatchPolicy,
    *,
    worker_id: str,
    drain: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
    transactional: bool = False,
    skip: Callable[[str | None], bool] = lambda job_id: False,
) -> WorkerStats:
    stats = WorkerStats()
    producer = new_producer()
    for batch in batches(consumer, assignment, limits, drain=drain, should_stop=should_stop):
        # records of cancelled jobs are consumed and committed, never run: counted as cancelled
        sources = [source_of(m) for m in batch if not skip(job_of(m.headers()))]
        out = handle_batch(sources, engine, config, topics, f"{worker_id}-{stats.batches}", policy)
        if transactional:
            try:
                commit_in_transaction(producer, consumer, out, batch)
            except TransactionAbortedError:
                continue  # rewound: the batch comes back in a later poll
        else:
            try:
                produce_all(producer, out, timeout_s=DELIVERY_TIMEOUT_S)
            except DeliveryError as exc:
                # A broker that restarted without its state (Tansu memory storage) no longer knows
                # this idempotent producer's id: librdkafka retries it forever, or turns the
                # producer fatal on the sequence gap. Nothing was committed, so a new producer
                # (a new id) sends the whole batch again; a second failure is a real outage, and
                # the worker exits.
                log.warning("%s; recreating the producer and producing the batch again", exc)
                with contextlib.suppress(KafkaException):  # a fatal producer may refuse even this
                    producer.purge()
                producer = new_producer()
                produce_all(producer, out, timeout_s=DELIVERY_TIMEOUT_S)
            try:
                commit_batch(consumer, batch)
            except KafkaException as exc:
                # The group moved on (a rebalance, a restarted broker): the outputs are stored and
                # keyed, so the records' redelivery only makes duplicates that readers drop.
                log.warning("commit failed (%s); the batch may be consumed again", exc)
        stats.batches += 1
        stats.records += len(batch)
    return stats


def serve(
    settings: KafkaSettings,
    topics: Topics,
    repository: Path,
    model: str,
    policy: BatchPolicy | None = None,
    *,
    max_queue: int | None = None,
    max_linger_ms: float = 20.0,
    engine_kind: str = "auto",
    threads: int = 0,
    drain: bool = False,
    exactly_once: bool = False,
    instance_id: str | None = None,
    engine: Engine | None = None,
) -> WorkerStats:
    """Load and warm the engine, then consume tensors.<model> in group gpu.<model> until told to stop.

    `engine` replaces the one engine_kind names (bench/feed.py runs a simulated accelerator)."""
    check_reachable(settings)  # seconds, not the minute an engine build may take, to say the broker is down
    config = load_model_config(repository, model)
    unknown = set(config.postprocess) - set(STEPS)
    if unknown:
        raise ValueError(f"model {model}: unknown postprocess steps {sorted(unknown)}")
    policy = policy or BatchPolicy(config.max_batch_size)
    if policy.max_batch_size > config.max_batch_size:
        raise ValueError(f"max_batch_size {policy.max_batch_size} exceeds the model's {config.max_batch_size}")
    # Poll more than one batch's worth, so sorting by length has something to sort.
    limits = BatchLimits(max_queue or 8 * policy.max_batch_size, max_linger_ms)
    engine = engine or make_engine(config, engine_kind, threads)
    engine.warmup()  # before subscribing: a broken engine must not hold partitions
    tensors = topics.tensors(model)
    ensure_topics(
        settings,
        [TopicSpec(tensors), TopicSpec(topics.results), TopicSpec(topics.dead_letters), jobs_topic(topics)],
    )
    worker_id = f"{socket.gethostname()}-{os.getpid()}"
    client = settings.with_client_id(f"gpu-{worker_id}")
    consumer = make_consumer(client, topics.gpu_group(model))
    # stable per worker instance, so a restarted instance fences its own zombie at once
    transactional_id = f"{topics.gpu_group(model)}.{instance_id or socket.gethostname()}"

    def new_producer() -> Producer:
        if exactly_once:
            return make_transactional_producer(client, transactional_id)
        return make_producer(client)

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    cancellations = Cancellations(settings, topics)
    assignment = subscribe(consumer, [tensors])
    log.info("gpu worker %s serving %s:%s with %s", worker_id, config.name, config.version, engine.name)
    try:
        return run(
            consumer,
            assignment,
            new_producer,
            engine,
            config,
            topics,
            limits,
            policy,
            worker_id=worker_id,
            drain=drain,
            should_stop=lambda: stopping,
            transactional=exactly_once,
            skip=cancellations.is_cancelled,
        )
    finally:
        cancellations.close()
        consumer.close()  # leave the group now, so the partitions move without waiting for the session timeout
