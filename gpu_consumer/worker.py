"""The GPU worker: the batching loop and the commit rule.

    for window in windows(...):        # a poll window: --max-window records or --max-linger-ms
        prepared = prepare(window)     # decode, sort by length, cut into executed batches, pad
        flow.submit(prepared, offsets) # the engine thread runs it; the emit thread produces
        commit()                       # offsets of the longest prefix of windows whose every
                                       # output the broker has confirmed (gpu_consumer/ledger.py)

The pipeline (gpu_consumer/pipeline.py) keeps at most --max-windows-in-flight windows between
poll and commit (one more for a live window); while it is full, windows() keeps polling with the
lanes paused, so commits and rebalances are served. Live windows run before queued batch ones.
A crash anywhere before a window's commit means it is consumed again:
at-least-once, and results are keyed by job/record so readers drop the duplicates. Before
partitions are revoked, every window in flight is finished and committed. --exactly-once runs the
windows one after the other, and one transaction spans up to --max-windows-in-flight of them
(kafka_io.transactions.OpenTransaction): their outputs and offsets commit together.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from types import FrameType

from gpu_consumer.batcher import BatchPolicy, default_window
from gpu_consumer.engine import Engine, make_engine, measure_cost
from gpu_consumer.handler import handle_window, prepare
from gpu_consumer.lanes import DEFAULT_BATCH_SHARE, EngineTime, LanePicker
from gpu_consumer.metrics import GpuMetrics, model_metrics, start_endpoint
from gpu_consumer.pipeline import Pipeline, PipelineConfig
from gpu_consumer.postprocess import STEPS
from kafka_io.cancellations import Cancellations
from kafka_io.clients import Consumer, Producer, check_reachable, close_consumer, make_consumer, make_producer
from kafka_io.errors import KAFKA_FAULTS
from kafka_io.polling import (
    Assignment,
    WindowLimits,
    assign_topics,
    commit_offsets,
    subscribe,
    window_offsets,
    windows,
)
from kafka_io.records import Headers
from kafka_io.settings import PRIORITIES, KafkaSettings, MetricsEndpoint, Topics
from kafka_io.topics import TopicSpec, ensure_topics, jobs_topic, lanes, partitions_of
from kafka_io.transactions import OpenTransaction, TransactionAbortedError, make_transactional_producer
from schemas.model_config import ModelConfig, load_model_config

log = logging.getLogger(__name__)

# The longest an exactly-once transaction stays open while windows keep coming: its results are
# invisible to read_committed readers until it commits.
TRANSACTION_AGE_S = 0.1


@dataclass
class WorkerStats:
    windows: int = 0
    records: int = 0


def run(
    consumer: Consumer,
    assignment: Assignment,
    new_producer: Callable[[], Producer],
    engine: Engine,
    config: ModelConfig,
    topics: Topics,
    limits: WindowLimits,
    policy: BatchPolicy,
    *,
    worker_id: str,
    drain: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
    transactional: bool = False,
    skip: Callable[[Headers], bool] = lambda headers: False,
    pipeline: PipelineConfig | None = None,
    metrics: GpuMetrics | None = None,
    batch_share: float = DEFAULT_BATCH_SHARE,
) -> WorkerStats:
    """Consume-infer-produce-commit until told to stop. Windows come from one lane at a time, the
    live lane first while the batch lane keeps `batch_share` of the engine time (gpu_consumer/lanes.py)."""
    metrics = metrics or GpuMetrics()
    if transactional:
        return _run_transactional(
            consumer,
            assignment,
            new_producer,
            engine,
            config,
            topics,
            limits,
            policy,
            worker_id,
            drain,
            should_stop,
            skip,
            pipeline or PipelineConfig(),
            metrics,
            batch_share,
        )
    stats = WorkerStats()
    flow = Pipeline(engine, config, topics, new_producer, pipeline, metrics)

    def commit() -> None:
        offsets, records = flow.ledger.take_committable()
        if not offsets:
            return
        try:
            commit_offsets(consumer, offsets)
        except KAFKA_FAULTS as exc:
            # The group moved on (a rebalance, a restarted broker): the outputs are stored and
            # keyed, so the records' redelivery only makes duplicates that readers drop.
            log.warning("commit failed (%s); its records may be consumed again", exc)
        stats.records += records

    def tick() -> None:  # after every poll, also while no record comes
        flow.check()  # a stalled delivery is noticed even when no new window arrives
        commit()
        metrics.tick(consumer, assignment)

    def before_revoke() -> None:
        if not flow.finish(commit):
            log.warning("windows still unconfirmed at revoke; their records will be consumed again")

    assignment.before_revoke = before_revoke
    picker = LanePicker(batch_share, lambda: flow.engine_time, flow.has_room, flow.queued)
    try:
        # An idle engine starts on what has come instead of waiting out the linger for more; a
        # window queued behind a busy engine lets the next one gather until it starts.
        polled = windows(
            consumer,
            assignment,
            limits,
            drain=drain,
            should_stop=should_stop,
            tick=tick,
            hurry=flow.engine_idle,
            hold=flow.window_waiting,
            lane_of=topics.lane_of,
            pick=picker,
        )
        for window in polled:
            metrics.polled(window[0].topic, len(window))
            # records of cancelled jobs are consumed and committed, never run: counted as cancelled
            sources = [r for r in window if not skip(r.headers)]
            prepared = prepare(sources, engine, config, topics, f"{worker_id}-{stats.windows}", policy)
            lane = topics.lane_of(window[0].topic)
            flow.submit(prepared, window_offsets(window), len(window), lane, contended=picker.contended)
            stats.windows += 1
            commit()
        flow.finish(commit)
    finally:
        assignment.before_revoke = None
        flow.close()
    return stats


def _run_transactional(
    consumer: Consumer,
    assignment: Assignment,
    new_producer: Callable[[], Producer],
    engine: Engine,
    config: ModelConfig,
    topics: Topics,
    limits: WindowLimits,
    policy: BatchPolicy,
    worker_id: str,
    drain: bool,
    should_stop: Callable[[], bool],
    skip: Callable[[Headers], bool],
    pipeline: PipelineConfig,
    metrics: GpuMetrics,
    batch_share: float,
) -> WorkerStats:
    """--exactly-once: windows' outputs and offsets in transactions of up to
    --max-windows-in-flight windows, committed when that many are in or TRANSACTION_AGE_S after
    the first, at once when no record is waiting, and before partitions are revoked."""
    stats = WorkerStats()
    txn = OpenTransaction(new_producer(), consumer, max_windows=pipeline.max_in_flight, max_age_s=TRANSACTION_AGE_S)
    metrics.follow(lambda: len(txn.windows))

    def commit() -> bool:
        try:
            stats.records += txn.commit()
            return True
        except TransactionAbortedError:
            # rewound: its windows come back in later polls, so nothing is caught up until then
            assignment.at_eof.clear()
            return False

    def settle() -> None:  # before a revoke, or while no record waits
        commit()

    assignment.before_revoke = settle
    engine_time = EngineTime()
    picker = LanePicker(batch_share, lambda: engine_time)  # reads engine_time as the loop below updates it

    try:
        while True:  # a drain ends only once its last transaction committed (or on a stop)
            for window in windows(
                consumer,
                assignment,
                limits,
                drain=drain,
                should_stop=should_stop,
                idle=settle,
                tick=lambda: metrics.tick(consumer, assignment),
                lane_of=topics.lane_of,
                pick=picker,
            ):
                metrics.polled(window[0].topic, len(window))
                sources = [r for r in window if not skip(r.headers)]
                window_id = f"{worker_id}-{stats.windows}"
                started = time.perf_counter()
                lane = topics.lane_of(window[0].topic)
                out = handle_window(
                    sources, engine, config, topics, window_id, policy, partial(metrics.executed, lane=lane)
                )
                if picker.contended:  # the share is of the time both lanes wanted the engine
                    engine_time = engine_time.served(lane, time.perf_counter() - started)
                try:
                    txn.add(window, out)
                except TransactionAbortedError:
                    assignment.at_eof.clear()
                    continue
                metrics.produced(out)
                stats.windows += 1
                if txn.due():
                    commit()
            if commit() or should_stop():
                break
    finally:
        assignment.before_revoke = None
    return stats


def serve(
    settings: KafkaSettings,
    topics: Topics,
    repository: Path,
    model: str,
    policy: BatchPolicy | None = None,
    *,
    max_batch_size: int | None = None,
    max_batch_tokens: int | None = None,
    max_window: int | None = None,
    max_linger_ms: float = 20.0,
    engine_kind: str = "auto",
    threads: int = 0,
    drain: bool = False,
    exactly_once: bool = False,
    instance_id: str | None = None,
    engine: Engine | None = None,
    pipeline: PipelineConfig | None = None,
    sole_consumer: bool = False,
    metrics: MetricsEndpoint | None = None,
    batch_share: float = DEFAULT_BATCH_SHARE,
) -> WorkerStats:
    """Load and warm the engine, then consume tensors.<model> in group gpu.<model> until told to stop.

    `engine` replaces the one engine_kind names (bench/feed.py runs a simulated accelerator).
    `sole_consumer` takes every partition without a group join: only for a worker known to be the
    group's one member (the embedded `nearline run`); two such workers would both read everything.
    `metrics`: serve Prometheus metrics there (gpu_consumer/metrics.py)."""
    if metrics is not None:
        start_endpoint(metrics)
    check_reachable(settings)  # seconds, not the minute an engine build may take, to say the broker is down
    config = load_model_config(repository, model)
    unknown = set(config.postprocess) - set(STEPS)
    if unknown:
        raise ValueError(f"model {model}: unknown postprocess steps {sorted(unknown)}")
    policy = policy or BatchPolicy(max_batch_size or config.max_batch_size, max_batch_tokens)
    if policy.max_batch_size > config.max_batch_size:
        raise ValueError(f"max_batch_size {policy.max_batch_size} exceeds the model's {config.max_batch_size}")
    limits = WindowLimits(max_window or default_window(policy.max_batch_size), max_linger_ms)
    engine = engine or make_engine(config, engine_kind, threads)
    engine.warmup()  # before subscribing: a broken engine must not hold partitions
    if policy.cost is None:
        policy = replace(policy, cost=measure_cost(engine, config))
    reports = model_metrics(config.name, config.version, engine.name) if metrics is not None else GpuMetrics()
    tensors = topics.tensors(model)
    lane_topics = [topics.lane(tensors, p) for p in PRIORITIES]  # both lanes, in one group
    ensure_topics(
        settings,
        [
            *lanes(topics, TopicSpec(tensors)),
            TopicSpec(topics.results),
            TopicSpec(topics.dead_letters),
            jobs_topic(topics),
        ],
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
    cancellations = Cancellations(settings, topics).start()
    if sole_consumer:
        assignment = assign_topics(consumer, {t: partitions_of(settings, t, consumer=consumer) for t in lane_topics})
    else:
        assignment = subscribe(consumer, lane_topics)
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
            skip=cancellations.skips,
            pipeline=pipeline,
            metrics=reports,
            batch_share=batch_share,
        )
    finally:
        cancellations.close()
        close_consumer(consumer)  # leave the group now, so the partitions move without waiting for the session timeout
