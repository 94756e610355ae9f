"""The GPU worker: the batching loop (run()) and the worker process (serve()).

One loop for both delivery guarantees; the commit step it hands each window to owns the commit
(gpu_consumer/steps.py, arroyo's shape):

    for window in windows(...):            # a poll window: --max-window records or --max-linger-ms
        step.submit(window, ...)           # prepare, execute, emit; commit what may be committed
    step.finish()                          # commit the rest at the end (exactly-once: an abort
                                           # rewound its windows, so windows() runs again)

The commit rule: a window's offsets move only once its outputs, and those of every window polled
before it, are stored. PipelinedStep (at-least-once, the default) runs windows on the pipeline's
threads (gpu_consumer/pipeline.py), keeps at most --max-windows-in-flight of them between poll
and commit (one more for a live window), live ones before queued bulk ones, and commits the
offsets of the longest prefix whose every output the broker confirmed (gpu_consumer/ledger.py).
While it is full, windows() consumes nothing and commits what finishes every few ms (what
librdkafka prefetched is kept). A crash before a window's commit means it is consumed again, and results are keyed by
job/record so readers drop the duplicates. TransactionalStep (--exactly-once) runs the windows
one after the other, and one transaction spans up to --max-windows-in-flight of them
(kafka_io.transactions.OpenTransaction): their outputs and offsets commit together. Before
partitions are revoked, either step commits everything it took (step.before_revoke).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Self

from gpu_consumer.batcher import BatchSettings, default_window
from gpu_consumer.cache_writes import announce_runtime, runtime_of
from gpu_consumer.engines.factory import batch_limits, make_engine, measure_cost, resolved_kind
from gpu_consumer.engines.generation_protocol import GenerationEngine, GenerationSettings
from gpu_consumer.engines.protocol import Engine
from gpu_consumer.generation.main_thread import drive_on_main, engine_threads_on
from gpu_consumer.generation.step import Engines, GenerationStep
from gpu_consumer.lanes import DEFAULT_BULK_SHARE, LanePicker
from gpu_consumer.metrics import GpuMetrics, model_metrics, start_endpoint
from gpu_consumer.pipeline import PipelineSettings
from gpu_consumer.postprocess import STEPS
from gpu_consumer.steps import CommitStep, Inference, PipelinedStep, TransactionalStep, WorkerStats
from gpu_consumer.vocabulary import vocabulary_size
from gpu_consumer.windows import WindowRules, WindowSettings, windows
from kafka_io.cancellations import Cancellations
from kafka_io.clients import (
    Consumer,
    Producer,
    check_group_protocol,
    check_reachable,
    close_consumer,
    make_consumer,
    make_producer,
)
from kafka_io.incarnation import BrokerIncarnation
from kafka_io.polling import Assignment, assign_topics, records_in, subscribe
from kafka_io.records import Headers
from kafka_io.result_cache import cache_topic
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics, jobs_topic, lanes, partitions_of
from kafka_io.topology import LANES, Topics
from kafka_io.transactions import make_transactional_producer
from model_repository.config import ModelConfig
from model_repository.folders import load_model_config
from runtime.cpus import host_cpus
from runtime.heap import settle_heap
from runtime.metrics_endpoint import MetricsEndpoint
from runtime.service import serve as run_service

log = logging.getLogger(__name__)


def _run_everything(headers: Headers) -> bool:
    return False


@dataclass(frozen=True)
class LoopSettings:
    """How run() loops, besides what it consumes and runs (Inference) and how it polls (WindowSettings)."""

    drain: bool = False  # return once every assigned partition is caught up
    should_stop: Callable[[], bool] = lambda: False  # asked after every poll (SIGTERM)
    transactional: bool = False  # exactly-once: TransactionalStep, else PipelinedStep
    skip: Callable[[Headers], bool] = _run_everything  # a cancelled job's records: consumed, not run
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    metrics: GpuMetrics | None = None
    bulk_share: float = DEFAULT_BULK_SHARE  # the bulk lane's share of engine time (LanePicker)
    incarnation: BrokerIncarnation | None = None  # a broker that restarts without its state
    # A causal LM's engine and what makes another when it fails: prompts run on it through
    # GenerationStep (inference.engine is unused)
    generation: Engines | None = None


def run(
    consumer: Consumer,
    assignment: Assignment,
    new_producer: Callable[[], Producer],
    inference: Inference,
    limits: WindowSettings,
    options: LoopSettings | None = None,
) -> WorkerStats:
    """Consume-infer-produce-commit until told to stop. Windows come from one lane at a time, the
    live lane first while the bulk lane keeps `bulk_share` of the engine time (gpu_consumer/lanes.py)."""
    options = options or LoopSettings()
    metrics = options.metrics or GpuMetrics()
    settings, should_stop, skip, topics = options.pipeline, options.should_stop, options.skip, inference.topics
    broker = options.incarnation or BrokerIncarnation()
    step: CommitStep
    if options.generation is not None:
        step = GenerationStep(
            consumer,
            assignment,
            broker,
            inference,
            options.generation,
            new_producer,
            metrics,
            settings.delivery_timeout_s,
        )
    elif options.transactional:
        step = TransactionalStep(consumer, assignment, broker, inference, new_producer, settings, metrics)
    else:
        step = PipelinedStep(consumer, assignment, broker, inference, new_producer, settings, metrics)

    def tick() -> None:  # after every poll, also while no record comes
        step.tick()
        metrics.tick(consumer, assignment)

    assignment.before_revoke = step.before_revoke
    flow = step.flow
    picker = LanePicker(options.bulk_share, lambda: flow.engine_time, flow.has_room, flow.queued)
    rules = WindowRules(
        drain=options.drain,
        should_stop=should_stop,
        tick=tick,
        idle=step.idle,
        hurry=flow.engine_idle,
        hold=flow.window_waiting,
        lane_of=topics.lane_of,
        pick=picker,
    )
    try:
        while True:  # a drain ends only once its last commit held (or on a stop)
            for window in windows(consumer, assignment, limits, rules):
                metrics.polled(window[0].topic, records_in(window))
                # records of cancelled jobs are consumed and committed, never run: counted as cancelled
                sources = [r for r in window if not skip(r.headers)]
                lane = topics.lane_of(window[0].topic)
                step.submit(window, sources, lane, picker.contended)
            # an exactly-once commit that aborted rewound its windows: poll them again
            if step.finish() or should_stop():
                break
    finally:
        assignment.before_revoke = None
        step.close()
    return step.stats


@dataclass(frozen=True)
class GpuWorkerSettings:
    """What `nearline worker gpu` is told (jobs/cli/workers.py builds it once): serve()'s knobs."""

    model: str
    engine_kind: str = "auto"  # gpu_consumer.ENGINES (gpu_consumer/engines/factory.py, engines/generation_factory.py)
    threads: int = 0  # the engine's; 0 = one per core
    max_batch_size: int | None = None  # rows of an executed batch; None: the engine's default
    max_batch_tokens: int | None = None  # tokens of an executed batch (padded); None: the default
    max_window: int | None = None  # records of a poll window; None: default_window(max_batch_size)
    max_linger_ms: float = 20.0  # how long a poll window waits to fill
    drain: bool = False
    exactly_once: bool = False
    instance_id: str | None = None  # the transactional id's suffix; None: the host name
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    sole_consumer: bool = False
    metrics: MetricsEndpoint | None = None
    bulk_share: float = DEFAULT_BULK_SHARE
    group_protocol: str = "classic"
    kv_cache_tokens: int | None = None  # causal LMs: the KV cache's size in tokens; None: the engine's default
    eager: bool = False  # causal LMs: no graph compilation (GenerationSettings.eager)
    engine_cpus: frozenset[int] | None = None  # causal LMs on the CPU: the engine's own CPUs (main_thread.py)


def serve(
    settings: KafkaSettings,
    topics: Topics,
    repository: Path,
    worker: GpuWorkerSettings,
    policy: BatchSettings | None = None,
    engine: Engine | None = None,
    generator: GenerationEngine | None = None,
) -> WorkerStats:
    """Load and warm the engine, then consume tensors.<model> in group gpu.<model> until told to
    stop, under the shape every worker runs in (runtime/service.py: serve).

    `policy` replaces the batch bounds the worker settings give; `engine` replaces the one
    engine_kind names (bench/feed.py runs a simulated accelerator), `generator` a causal LM's
    (bench/generate.py runs a zero-cost one).
    `sole_consumer` takes every partition without a group join: only for a worker known to be the
    group's one member (the embedded `nearline run`); two such workers would both read everything.
    `metrics`: serve Prometheus metrics there (gpu_consumer/metrics.py).
    `group_protocol`: "consumer" joins with Kafka 4's consumer group protocol (KIP-848; refused at
    start by a broker without it), where a member that joins or leaves moves only the partitions
    that change owner, not every member's (docs/brokers.md)."""
    # the CPUs left to the loop where the engine has its own: a wrong list is said before the broker is tried
    loop_cpus = host_cpus(worker.engine_cpus) if worker.engine_cpus is not None else None
    if worker.metrics is not None:
        start_endpoint(worker.metrics)
    given = Given(policy, engine, generator)
    # probed in seconds, not after the minute an engine build may take, to say the broker is down
    return run_service(
        lambda: GpuWorker(settings, topics, repository, worker, given, loop_cpus), partial(check_reachable, settings)
    )


@dataclass(frozen=True)
class Given:
    """What a caller hands serve() in place of what the settings name (a benchmark's stand-ins)."""

    policy: BatchSettings | None = None
    engine: Engine | None = None
    generator: GenerationEngine | None = None


class GpuWorker:
    """The GPU worker, opened (its model read, its engine built and warmed before it subscribes:
    a broken engine must not hold partitions), run until `stop` is set, and closed."""

    def __init__(
        self,
        settings: KafkaSettings,
        topics: Topics,
        repository: Path,
        worker: GpuWorkerSettings,
        given: Given,
        loop_cpus: frozenset[int] | None,
    ) -> None:
        self.settings, self.topics, self.worker, self.given, self.loop_cpus = settings, topics, worker, given, loop_cpus
        self.repository = repository
        self.engine: Engine | None = given.engine
        self.policy = BatchSettings(1)  # what the engine opened takes: set on open
        self.generator: GenerationEngine | None = given.generator
        self.build: Callable[[], GenerationEngine] | None = None  # a causal LM's next engine, on this thread

    def __enter__(self) -> Self:
        worker = self.worker
        check_group_protocol(self.settings, worker.group_protocol)
        self.config = config = load_model_config(self.repository, worker.model)
        if worker.engine_cpus is not None and not config.is_generator:
            raise ValueError(
                f"model {config.name} is an encoder: --engine-cpus gives CPUs to a causal LM's engine "
                "(--threads sizes an encoder's)"
            )
        if config.is_generator:
            self._open_generator()
        else:
            self._open_encoder()
        return self

    def _open_encoder(self) -> None:
        config, worker, engine, policy = self.config, self.worker, self.engine, self.given.policy
        unknown = set(config.postprocess) - set(STEPS)
        if unknown:
            raise ValueError(f"model {config.name}: unknown postprocess steps {sorted(unknown)}")
        kind = resolved_kind(config, worker.engine_kind) if engine is None else engine.name
        if policy is None:
            rows, tokens = batch_limits(config, kind, worker.max_batch_size, worker.max_batch_tokens)
            policy = BatchSettings(rows, tokens)
        if policy.max_batch_size > config.max_batch_size and not (
            kind == "cuda-torch" and policy.max_batch_tokens is not None
        ):
            raise ValueError(
                f"max_batch_size {policy.max_batch_size} exceeds the model's {config.max_batch_size} "
                "(only the torch engine on CUDA takes more, with --max-batch-tokens bounding a batch)"
            )
        engine = engine or make_engine(
            config, worker.engine_kind, worker.threads, policy.max_batch_size, policy.max_batch_tokens
        )
        engine.warmup()  # before subscribing
        vocabulary_size(config)  # the tokenizer read once now, not in the first window's time
        self.engine = engine
        self.policy = policy if policy.cost is not None else replace(policy, cost=measure_cost(engine, config))

    def _open_generator(self) -> None:
        """A causal LM: the engine decodes with continuous batching (gpu_consumer/generation/), and
        the loop hands each window's prompts to it as they are polled. --max-batch-size is the most
        sequences decoded at once; exactly-once is not offered (a completion is produced as its
        sequence ends, outside any window's transaction). This thread builds and steps the engine."""
        from gpu_consumer.engines.generation_factory import make_generator

        config, worker = self.config, self.worker
        if worker.exactly_once:
            raise ValueError(f"model {config.name} generates text: --exactly-once is not offered for generation")
        self.policy = BatchSettings(1)  # a window's prompts join the engine's running batch as they come
        if self.generator is not None:
            return
        limits = GenerationSettings(max_sequences=worker.max_batch_size or config.max_batch_size, eager=worker.eager)
        if worker.kv_cache_tokens is not None:
            limits = replace(limits, kv_cache_tokens=worker.kv_cache_tokens)
        self.build = partial(make_generator, config, worker.engine_kind, limits, driven=True)
        if worker.engine_cpus is not None:
            engine_threads_on(worker.engine_cpus)  # the loop's, `loop_cpus`, are the others
        self.generator = self.build()

    def run(self, stop: threading.Event) -> WorkerStats:
        consume = partial(_consume, self.settings, self.topics, self.config, self.worker)
        if not self.config.is_generator:
            return consume(self.engine, self.policy, stop)
        generator = self.generator
        assert generator is not None  # opened
        if self.build is None:  # handed in: driven by the caller's own means
            return consume(None, self.policy, stop, Engines(generator))

        def loop(renew: Callable[[], GenerationEngine]) -> WorkerStats:
            generator.warmup()  # before subscribing: a broken model must not hold partitions
            # after an engine failure, another (built on the main thread, warmed by the step)
            return consume(None, self.policy, stop, Engines(generator, renew))

        # the loop on a thread of its own (generation/main_thread.py says why), on `loop_cpus`
        return drive_on_main(generator, self.build, loop, self.loop_cpus)

    def __exit__(self, *exc: object) -> None:
        if self.build is not None and self.generator is not None:
            self.generator.close()


def _consume(
    settings: KafkaSettings,
    topics: Topics,
    config: ModelConfig,
    worker: GpuWorkerSettings,
    engine: Engine | None,
    policy: BatchSettings,
    stop: threading.Event,
    generation: Engines | None = None,
) -> WorkerStats:
    """Subscribe to tensors.<model> (both lanes) with the engine warm, and run the loop until `stop` is set."""
    model, metrics = config.name, worker.metrics
    running = generation.first if generation is not None else engine
    engine_name = running.name if running is not None else "none"
    reports = model_metrics(config.name, config.version, engine_name) if metrics is not None else GpuMetrics()
    limits = WindowSettings(worker.max_window or default_window(policy.max_batch_size), worker.max_linger_ms)
    tensors = topics.tensors(model)
    lane_topics = [topics.lane(tensors, p) for p in LANES]  # both lanes, in one group
    ensure_topics(
        settings,
        [
            *lanes(topics, TopicSpec(tensors)),
            TopicSpec(topics.results),
            TopicSpec(topics.dead_letters),
            jobs_topic(topics),
            cache_topic(topics, model),  # the results cache this worker writes (cache_writes.py)
        ],
    )
    if not worker.exactly_once:  # a transactional worker caches nothing (cache_writes.py)
        announce_runtime(settings, topics, model, runtime_of(running))
    worker_id = f"{socket.gethostname()}-{os.getpid()}"
    client = settings.with_client_id(f"gpu-{worker_id}")
    incarnation = BrokerIncarnation()  # a broker that restarts without its state: kafka_io/incarnation.py
    consumer = make_consumer(
        client, topics.gpu_group(model), **{"group.protocol": worker.group_protocol}, error_cb=incarnation.on_error
    )
    # stable per worker instance, so a restarted instance fences its own zombie at once
    transactional_id = f"{topics.gpu_group(model)}.{worker.instance_id or socket.gethostname()}"

    def new_producer() -> Producer:
        if worker.exactly_once:
            return make_transactional_producer(client, transactional_id)
        return make_producer(client)

    cancellations = Cancellations(settings, topics).start()
    if worker.sole_consumer:
        assignment = assign_topics(consumer, {t: partitions_of(settings, t, consumer=consumer) for t in lane_topics})
    else:
        assignment = subscribe(consumer, lane_topics)
    incarnation.generation = lambda: assignment.revocations
    log.info("gpu worker %s serving %s:%s with %s", worker_id, config.name, config.version, engine_name)
    settle_heap()  # the engine, its libraries and the clients: never scanned by the collector again
    try:
        options = LoopSettings(
            drain=worker.drain,
            should_stop=stop.is_set,
            transactional=worker.exactly_once,
            skip=cancellations.skips,
            pipeline=worker.pipeline,
            metrics=reports,
            bulk_share=worker.bulk_share,
            incarnation=incarnation,
            generation=generation,
        )
        inference = Inference(engine, config, topics, policy, worker_id, cancellations.skips_submission)
        return run(consumer, assignment, new_producer, inference, limits, options)
    finally:
        cancellations.close()
        close_consumer(consumer)  # leave the group now, so the partitions move without waiting for the session timeout
