"""The preprocess worker: faust wiring only. The work itself is preprocess_app.text and .image.

Events are Kafka records: for texts, packs of many records (schemas/packs.py); batch sizes, metrics
and backpressure count the records in them.

Commit rule: a batch's events are acked, so faust may commit past them, only after every tensor
record and dead letter it produced has been confirmed by the broker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import faust
from faust.tables import TableManager

from kafka_io.cancellations import Cancellations
from kafka_io.clients import make_producer
from kafka_io.deliveries import Confirm, ServedProducer
from kafka_io.faust_auth import faust_credentials
from kafka_io.limits import MAX_RECORD_BYTES
from kafka_io.offsets import group_lag
from kafka_io.records import ConsumedRecord, OutRecord, records_of
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, lanes, partitions_of, try_ensure_topics
from kafka_io.topology import LANES, Lane, Topics
from preprocess_app.acks import ConfirmedAcks
from preprocess_app.faust_patches import drain_eagerly, ride_out_outages, take_every_partition, tick_take
from preprocess_app.image import preprocess_images
from preprocess_app.lanes import RecordsPerPack, held_lanes, model_of_tensors, topic_lane
from preprocess_app.metrics import LAG_EVERY_S, PreprocessMetrics
from preprocess_app.models import Models, ServedModels
from preprocess_app.outage_log import BrokerWait
from preprocess_app.reuse import CacheTails, ReuseLookup
from preprocess_app.text import preprocess_texts
from runtime.cpus import usable_cpus
from runtime.metrics_endpoint import MetricsEndpoint
from schemas.packs import records_held

log = logging.getLogger(__name__)

Step = Callable[[Sequence[ConsumedRecord]], list[OutRecord]]

# faust builds its aiokafka consumer with fetch_max_wait_ms=1500 and no setting to change it. A
# broker answers a waiting fetch as soon as data arrives only if it wakes fetches on produce; Tansu
# answered ~380 ms late at 1500 and ~1 ms late at 100 (measured with aiokafka), and a warm 50-record
# job's "wait for preprocess" went from ~1.3 s to ~1.05 s (the rest is not explained yet). At 100
# an idle worker sends ten empty fetches a second.
FETCH_MAX_WAIT_MS = 100


def prompt_fetches() -> None:
    """Cap the fetch wait of the consumers faust creates (its driver hard-codes 1500 ms)."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    create = AIOKafkaConsumerThread._create_worker_consumer
    if getattr(create, "nearline_prompt", False):
        return

    def create_prompt(self: Any, transport: Any) -> Any:
        consumer = create(self, transport)
        # read by aiokafka when start() builds its fetcher, which happens after this
        consumer._fetch_max_wait_ms = min(consumer._fetch_max_wait_ms, FETCH_MAX_WAIT_MS)
        return consumer

    create_prompt.nearline_prompt = True  # type: ignore[attr-defined]
    setattr(AIOKafkaConsumerThread, "_create_worker_consumer", create_prompt)  # noqa: B010 (a method)


class TablelessManager(TableManager):
    """faust's table manager sleeps a second at start, so that agents may still declare tables,
    before the consumer may subscribe: a second added to every worker start and to `nearline run`'s
    time to first result. This app declares no table (every agent exists before the worker starts),
    so it goes straight on; an app with tables keeps faust's wait."""

    async def on_start(self) -> None:
        if len(self):
            await super().on_start()
            return
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


@dataclass(frozen=True)
class PreprocessSettings:
    """What `nearline worker preprocess` is told (jobs/cli/workers.py builds it once)."""

    text_batch: int = 64  # records a tokenizer call takes (packs are never split)
    image_batch: int = 16
    # What has come is handed over at the next tick of this many seconds (faust_patches.py:
    # tick_take, not a timer from the first record): a record waits up to it. 50 ms was a fifth of
    # a small job's time end to end.
    max_linger_s: float = 0.02
    threads: int | None = None  # image decode threads; None: one per usable core
    max_tensor_lag: int | None = None  # backpressure: a GPU group this many records behind holds a lane
    session_timeout_s: float = 6.0
    metrics: MetricsEndpoint | None = None
    sole_consumer: bool = False  # every partition without a group join (faust_patches.py: take_every_partition)
    # False: no results cache (docs/reuse.md): nothing looked up, no reuse keys sent on, so the GPU
    # workers cache nothing of what this worker preprocessed, and cache.<model> is never read here
    results_cache: bool = True


def create_app(
    settings: KafkaSettings,
    topics: Topics,
    repository: Path,
    datadir: Path,
    worker: PreprocessSettings,
    broker_wait: BrokerWait | None = None,  # what the worker's log says in an outage (preprocess_app/outage_log.py)
    metrics: PreprocessMetrics | None = None,  # preprocess_metrics(worker.metrics), bound by run_worker
) -> faust.App:
    """The faust app: one agent per kind of input and lane, each running Batches.run."""
    prompt_fetches()
    ride_out_outages()
    app = _faust_app(settings, topics, datadir, worker.session_timeout_s)
    if worker.sole_consumer:
        raws = [topics.lane(t, lane) for t in (topics.raw_text, topics.raw_image) for lane in LANES]
        take_every_partition(app, {t: partitions_of(settings, t) for t in raws})
    drain_eagerly(app)
    batches = Batches(app, settings, topics, worker, metrics or PreprocessMetrics())
    # a model's tensors topics are created before its first record is preprocessed; records of a
    # model whose topics Kafka refuses are dead letters saying why (ServedModels)
    models = ServedModels(
        Models(repository),
        lambda model: try_ensure_topics(settings, lanes(topics, TopicSpec(topics.tensors(model)))),
    )
    # Images of a batch decode in parallel on their own pool (never the one their batch runs on,
    # which could deadlock): Pillow releases the GIL while it decodes and resizes.
    decode_pool = ThreadPoolExecutor(max_workers=worker.threads or usable_cpus(), thread_name_prefix="decode")
    # results reused before any CPU work: each model's cache.<model> read into a store whose
    # values spool in a scratch folder, by one preprocess worker of the host for all of them
    # (preprocess_app/reuse.py, cache_share.py)
    reuse = ReuseLookup(CacheTails(settings, topics, datadir / "reuse")) if worker.results_cache else None
    texts = functools.partial(preprocess_texts, models=models, topics=topics, reuse=reuse)
    images = functools.partial(preprocess_images, models=models, topics=topics, map_fn=decode_pool.map, reuse=reuse)

    app.timer(1.0)(batches.measure_lag)
    app.timer(LAG_EVERY_S)(batches.refresh_lag_metrics)
    if broker_wait is not None:

        async def notice_broker_back() -> None:
            if broker_wait.waiting:  # only during an outage: a connect to the bootstrap address, off the loop
                await asyncio.get_running_loop().run_in_executor(None, broker_wait.check_back)

        app.timer(2.0)(notice_broker_back)
    # One agent per kind and lane, live first: each has its own stream buffer (faust stops
    # fetching a partition whose buffer fills, that partition only) and its own backpressure, so
    # live records never queue behind a backfill. The same group reads every lane's topic.
    for lane in LANES:
        for raw, step, size in (
            (topics.raw_text, texts, worker.text_batch),
            (topics.raw_image, images, worker.image_batch),
        ):
            add_agent(app, topics.lane(raw, lane), step, size, batches.run)
    return app


def _faust_app(settings: KafkaSettings, topics: Topics, datadir: Path, session_timeout_s: float) -> faust.App:
    return faust.App(
        topics.preprocess_app_id,
        broker=",".join(f"kafka://{s}" for s in settings.bootstrap_servers.split(",")),
        value_serializer="raw",
        key_serializer="raw",
        # seconds to join and to fail over instead of faust's 60 s session (docs/brokers.md)
        broker_session_timeout=session_timeout_s,
        broker_heartbeat_interval=min(1.0, session_timeout_s / 6),
        broker_rebalance_timeout=10.0,
        consumer_auto_offset_reset="earliest",
        producer_max_request_size=MAX_RECORD_BYTES,
        consumer_max_fetch_size=MAX_RECORD_BYTES,
        # Topics are created by us at their final size; faust would create them with its default
        # partition count, and the leader-election topic is unused.
        topic_allow_declare=False,
        topic_disable_leader=True,
        web_enabled=False,
        TableManager=TablelessManager,
        # TLS/SASL from the same NEARLINE_KAFKA_* settings every other client gets; settings faust
        # cannot apply are refused here, before connecting
        broker_credentials=faust_credentials(settings.extra),
        datadir=str(datadir),
    )


class Batches:
    """Batches of events through a preprocessing step into tensor records: backpressure, the step
    on an executor thread, outputs to the producer, acks once they are stored (ConfirmedAcks)."""

    def __init__(
        self,
        app: faust.App,
        settings: KafkaSettings,
        topics: Topics,
        worker: PreprocessSettings,
        metrics: PreprocessMetrics,
    ) -> None:
        self.app, self.settings, self.topics, self.metrics = app, settings, topics, metrics
        self.max_tensor_lag, self.max_linger_s = worker.max_tensor_lag, worker.max_linger_s
        self.cancellations = Cancellations(settings, topics).start()
        self.producer = ServedProducer(make_producer(settings, idempotent=False))
        self.known_topics: set[str] = {topics.dead_letters}
        # Backpressure: while a GPU group lags more than max_tensor_lag records behind its tensor
        # topic, batches wait before they are processed; faust then stops fetching once its stream
        # buffer is full, so memory stays bounded however far ahead the producers are. The lag is
        # measured every second and, in between, raised by what this worker itself produced, so a
        # fast tokenizer cannot overshoot the bound by a second's worth of records. Both in records:
        # the measured lag counts Kafka records, which are packs of text tensors, so it is scaled by
        # the records per pack this worker has written to that topic (RecordsPerPack); the raise
        # counts each output's `records` header.
        self.lag: dict[str, int] = {}
        self.per_pack = RecordsPerPack()

    async def measure_lag(self) -> None:
        if self.max_tensor_lag is not None:
            tensor_topics = self.known_topics - {self.topics.dead_letters}
            loop = asyncio.get_running_loop()
            packs = await loop.run_in_executor(None, tensor_lags, self.settings, self.topics, tensor_topics)
            self.lag.update({t: self.per_pack.records(t, n) for t, n in packs.items()})

    async def refresh_lag_metrics(self) -> None:
        await self.metrics.refresh_lag(self.app.consumer)

    async def wait_for_gpus(self, lane: Lane) -> None:
        """Backpressure per lane: a backfill whose GPU group lags holds the bulk lane only."""
        if lane not in held_lanes(self.lag, self.topics, self.max_tensor_lag):
            return
        log.warning(
            "backpressure: GPU lag %s over %d records; pausing the %s lane", self.lag, self.max_tensor_lag, lane
        )
        self.metrics.paused(True)
        # Not past a stop: faust's shutdown waits for the batch in hand to be acked, so a held
        # batch kept a SIGTERMed worker up until its SIGKILL; stopping, the batch is processed
        # (a little past the bound) and the worker leaves its group at once.
        while lane in held_lanes(self.lag, self.topics, self.max_tensor_lag) and not self.app.should_stop:
            await asyncio.sleep(0.2)
        self.metrics.paused(False)

    def step_and_send(self, step: Step, sources: list[ConsumedRecord], topic: str, confirm: Confirm) -> list[OutRecord]:
        """On an executor thread: preprocess a batch and hand its outputs to the producer."""
        started = time.perf_counter()
        out = step(sources)
        consumed = sum(s.records for s in sources)  # records, packs counted by their `records` header
        self.metrics.batch(topic, consumed, time.perf_counter() - started, topic_lane(self.topics, topic))
        # every output topic exists: the step's model lookup created it (ServedModels)
        self.known_topics.update(r.topic for r in out)
        self.producer.send(out, confirm)
        return out

    async def run(self, stream: Any, step: Step, batch_size: int, topic: str) -> None:
        """An agent's loop. batch_size bounds the records of a batch, not its events: faust's events
        are packs (or single records), and tick_take adds up their `records` headers. An event is
        never split, so a pack over batch_size is a batch alone; no batch then holds more records
        than max(batch_size - 1 + a pack, a pack), and the tokenizer still gets its texts in one call."""
        loop = asyncio.get_running_loop()
        acks = ConfirmedAcks(stream.ack, fail, self.metrics.produced)
        lane = topic_lane(self.topics, topic)
        async for events in tick_take(stream, batch_size, self.max_linger_s, event_records):
            await self.wait_for_gpus(lane)
            batch = await acks.open()
            try:
                sources = [
                    # with the headers, which name the job even when the value cannot be decoded
                    ConsumedRecord(m.topic, m.partition, m.offset, m.value, m.key, pairs(m.headers))
                    for m in (e.message for e in events)
                    if not self.cancellations.skips(m.headers)  # counted as cancelled
                ]
                out = await loop.run_in_executor(None, self.step_and_send, step, sources, topic, batch.confirm)
            except Exception:
                # Not the records' fault (their errors are dead letters): the broker or the worker
                # itself is broken. Exit without acking so Kafka redelivers to a healthy worker.
                fail("preprocess worker failed; exiting so the batch is redelivered")
            for r in out:
                if r.topic != self.topics.dead_letters:
                    records = records_of(r.headers)
                    self.lag[r.topic] = self.lag.get(r.topic, 0) + records
                    self.per_pack.add(r.topic, records)
            acks.ack_when_stored(batch, events, out)


def add_agent(app: faust.App, topic: str, step: Step, batch_size: int, run_batches: Any) -> None:
    """An agent reading `topic` in batches of `batch_size`, named after the topic (faust keys agents by name)."""

    async def preprocess(stream: Any) -> None:
        await run_batches(stream, step, batch_size, topic)

    preprocess.__name__ = preprocess.__qualname__ = f"preprocess_{topic.replace('.', '_').replace('-', '_')}"
    app.agent(app.topic(topic, value_serializer="raw", key_serializer="raw"), name=preprocess.__name__)(preprocess)


def event_records(event: Any) -> int:
    """The records a faust event holds: its message's `records` header (a pack), capped at what
    its bytes can hold (records_held), else 1."""
    message = event.message
    headers = message.headers
    return records_held(records_of(headers if isinstance(headers, dict) else pairs(headers)), message.value)


def pairs(headers: Any) -> tuple[tuple[str, bytes | None], ...]:
    """A faust message's headers (a mapping or a list of pairs) as ConsumedRecord keeps them."""
    if not headers:
        return ()
    return tuple(headers.items()) if isinstance(headers, Mapping) else tuple(headers)


def fail(reason: str) -> NoReturn:
    """Exit at once, acking nothing more: Kafka redelivers what was not acked to a healthy worker."""
    log.error("%s", reason, exc_info=sys.exc_info()[0] is not None)
    logging.shutdown()
    os._exit(1)


def tensor_lags(settings: KafkaSettings, topics: Topics, tensor_topics: set[str]) -> dict[str, int]:
    """Kafka records (packs, for texts) each model's GPU group has yet to consume from its tensor topic."""
    return {t: group_lag(settings, topics.gpu_group(model_of_tensors(topics, t)), t) for t in tensor_topics}
