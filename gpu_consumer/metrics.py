"""What the GPU worker measures for Prometheus, updated once per poll window or executed batch.

Per executed batch (on the emit thread, off the engine's path): its rows, padded and real tokens,
inference seconds, and each record's end-to-end latency in one numpy call. Per window (main
thread): records consumed, and every few seconds the consumer lag. Windows in flight, engine busy
and padding waste over the last minute are computed only when scraped. Without --metrics-port the
worker holds the base GpuMetrics, whose methods do nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from prometheus_client import Counter, Gauge, Histogram

from gpu_consumer.window_inference import Executed
from kafka_io.clients import Consumer
from kafka_io.metrics import (
    BATCH_SECONDS_BUCKETS,
    BulkHistogram,
    Every,
    RecentSums,
    Traffic,
    build_info,
    serve_metrics,
)
from kafka_io.polling import Assignment, consumer_lag
from kafka_io.records import OutRecord
from kafka_io.topology import LANES, Lane
from runtime.metrics_endpoint import MetricsEndpoint
from schemas import now_us

WORKER = "gpu"
LAG_EVERY_S = 5.0
RECENT_S = 60  # the window of the busy and padding-waste gauges

BATCH_SIZE = Histogram(
    "nearline_batch_size_records",
    "Records per executed batch.",
    ["model"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)
BATCH_PADDED_TOKENS = Histogram(
    "nearline_batch_padded_tokens",
    "Tokens per executed text batch once padded (rows x padded width).",
    ["model"],
    buckets=tuple(2.0**k for k in range(4, 18)),  # 16 .. 131072
)
REAL_TOKENS = Counter(
    "nearline_real_tokens_total", "Tokens of the records in executed text batches, before padding.", ["model"]
)
PADDED_TOKENS = Counter(
    "nearline_padded_tokens_total",
    "Tokens of executed text batches once padded; 1 - rate(real) / rate(padded) is the padding waste over any window.",
    ["model"],
)
PADDING_WASTE = Gauge(
    "nearline_padding_waste_ratio",
    f"Share of executed tokens that were padding, over the last {RECENT_S} s.",
    ["model"],
)
ENGINE_BUSY = Counter(
    "nearline_engine_busy_seconds_total",
    "Seconds the engine spent on executed batches; its rate is the engine's busy fraction.",
    ["model"],
)
ENGINE_BUSY_RATIO = Gauge(
    "nearline_engine_busy_ratio", f"Share of the last {RECENT_S} s the engine spent on executed batches.", ["model"]
)
INFERENCE = Histogram(
    "nearline_inference_seconds",
    "Seconds per executed batch, from the previous batch's outputs (or the window's start) to its own.",
    ["model"],
    buckets=BATCH_SECONDS_BUCKETS,
)
LANE_ENGINE = Counter(
    "nearline_lane_engine_seconds_total",
    "Seconds the engine spent on executed batches of each priority lane (live, bulk): their rates' "
    "ratio is the share of the engine each lane got (--bulk-share is the bulk lane's minimum).",
    ["model", "lane"],
)
END_TO_END = BulkHistogram(
    "nearline_end_to_end_seconds",
    "Seconds from a record's submission to its result being produced, by priority lane.",
    (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
    ["model", "lane"],
)
GENERATED_TOKENS = Counter(
    "nearline_generated_tokens_total", "Tokens of the completions a causal LM produced results for.", ["model"]
)
COMPLETIONS = Counter(
    "nearline_completions_total",
    "Completions a causal LM produced results for, by why they ended (stop, length).",
    ["model", "finish_reason"],
)
WINDOWS_IN_FLIGHT = Gauge(
    "nearline_windows_in_flight", "Poll windows between poll and commit (at most --max-windows-in-flight).", ["model"]
)


class GpuMetrics:
    """What the GPU worker reports. This base reports nothing: the worker without --metrics-port."""

    def follow(self, in_flight: Callable[[], int]) -> None:
        """Windows in flight, read from `in_flight` whenever a scrape asks."""

    def polled(self, topic: str, records: int) -> None:
        """A poll window of `records` records taken from `topic` (main thread)."""

    def tick(self, consumer: Consumer, assignment: Assignment) -> None:
        """After every poll: the consumer lag, refreshed every LAG_EVERY_S."""

    def executed(self, run: Executed, lane: Lane = "bulk") -> None:
        """An executed batch of `lane` whose results were just produced (emit thread)."""

    def produced(self, records: Sequence[OutRecord]) -> None:
        """Records handed to the producer."""

    def completed(self, tokens: int, finish_reason: str, submitted_us: int | None, lane: Lane) -> None:
        """A causal LM's completion of `tokens` tokens whose result was just produced (emit thread)."""

    def engine_busy(self, seconds: float) -> None:
        """Seconds a causal LM's engine spent decoding since the last call (main thread)."""


class PrometheusGpuMetrics(GpuMetrics):
    def __init__(self, model: str) -> None:
        self.traffic = Traffic(WORKER)
        self._lag_due = Every(LAG_EVERY_S)
        self._size = BATCH_SIZE.labels(model)
        self._padded = BATCH_PADDED_TOKENS.labels(model)
        self._real_tokens, self._padded_tokens = REAL_TOKENS.labels(model), PADDED_TOKENS.labels(model)
        self._busy, self._inference = ENGINE_BUSY.labels(model), INFERENCE.labels(model)
        self._lane_engine = {lane: LANE_ENGINE.labels(model, lane) for lane in LANES}
        self._end_to_end = {lane: END_TO_END.labels(model, lane) for lane in LANES}
        self._windows = WINDOWS_IN_FLIGHT.labels(model)
        self._generated = GENERATED_TOKENS.labels(model)
        # both series there at 0 before any completion, as the dashboard's rates expect
        self._completions = {reason: COMPLETIONS.labels(model, reason) for reason in ("stop", "length")}
        self._recent = RecentSums(3, RECENT_S)  # busy seconds, real tokens, padded tokens
        ENGINE_BUSY_RATIO.labels(model).set_function(self._busy_ratio)
        PADDING_WASTE.labels(model).set_function(self._padding_waste)

    def follow(self, in_flight: Callable[[], int]) -> None:
        self._windows.set_function(in_flight)

    def polled(self, topic: str, records: int) -> None:
        self.traffic.consumed(topic, records)

    def tick(self, consumer: Consumer, assignment: Assignment) -> None:
        if self._lag_due.due():
            self.traffic.lag(consumer_lag(consumer, assignment.assigned))

    def executed(self, run: Executed, lane: Lane = "bulk") -> None:
        batch = run.batch
        seconds = (run.finished_us - run.started_us) / 1e6
        self._size.observe(batch.size)
        self._inference.observe(seconds)
        self._busy.inc(seconds)
        self._lane_engine[lane].inc(seconds)
        real = padded = 0
        if batch.width:  # text: images have no tokens
            real, padded = int(batch.lengths.sum()), batch.padded_tokens
            self._padded.observe(padded)
            self._real_tokens.inc(real)
            self._padded_tokens.inc(padded)
        self._recent.add(seconds, real, padded)
        submitted = np.fromiter((i.timestamps.get("submitted", 0) for i in run.items), np.int64, len(run.items))
        submitted = submitted[submitted > 0]  # records from producers that stamp no submission
        self._end_to_end[lane].observe_many((now_us() - submitted) / 1e6)

    def produced(self, records: Sequence[OutRecord]) -> None:
        self.traffic.produced_records(records)

    def completed(self, tokens: int, finish_reason: str, submitted_us: int | None, lane: Lane) -> None:
        self._generated.inc(tokens)
        self._completions[finish_reason].inc()
        if submitted_us:
            self._end_to_end[lane].observe_many(np.array([(now_us() - submitted_us) / 1e6]))

    def engine_busy(self, seconds: float) -> None:
        self._busy.inc(seconds)
        self._recent.add(seconds, 0, 0)

    def _busy_ratio(self) -> float:
        (busy, _, _), span = self._recent.sums()
        return min(1.0, busy / span)

    def _padding_waste(self) -> float:
        (_, real, padded), _ = self._recent.sums()
        return 1.0 - real / padded if padded else 0.0


def start_endpoint(endpoint: MetricsEndpoint) -> None:
    """Serve /metrics before the engine is built: a port that cannot be bound fails the worker at
    once, and the worker is seen (up, with its build info) while an engine builds for minutes."""
    serve_metrics(endpoint, WORKER)


def model_metrics(model: str, model_version: str, engine: str) -> PrometheusGpuMetrics:
    """The metrics of a worker serving `model` on `engine`, once both are loaded."""
    build_info(WORKER, model=model, model_version=model_version, engine=engine)
    return PrometheusGpuMetrics(model)
