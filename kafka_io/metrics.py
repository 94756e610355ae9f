"""Prometheus metrics every worker exports, and the pieces the stages' own metrics are built on.

A worker started with --metrics-port serves prometheus_client's default registry (which also
holds the process collector: CPU seconds, resident memory, open files) at
http://0.0.0.0:PORT/metrics, or https with --metrics-tls-cert (and mutual TLS with
--metrics-client-ca). Here: that endpoint, build info, records consumed and produced per
topic, consumer lag per partition, dead letters by stage and reason; and two helpers for metrics
updated once per executed batch rather than once per record: a histogram observed a numpy array
at a time (BulkHistogram) and sums over the last minute, read only when scraped (RecentSums).
What each stage measures lives with the stage: gpu_consumer/metrics.py,
preprocess_app/metrics.py, jobs/scheduling/metrics.py.
"""

from __future__ import annotations

import importlib.metadata
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from kafka_io.records import TP, OutRecord
from runtime.metrics_endpoint import MetricsEndpoint
from runtime.metrics_http import start_server

BUILD_INFO = Gauge(
    "nearline_build_info",
    "Always 1: this worker's nearline version, its kind and, for a GPU worker, its model and engine.",
    ["version", "worker", "model", "model_version", "engine"],
)
RECORDS_CONSUMED = Counter(
    "nearline_records_consumed_total", "Records taken from Kafka (cancelled jobs' records too).", ["worker", "topic"]
)
RECORDS_PRODUCED = Counter(
    "nearline_records_produced_total", "Records handed to the producer, by topic.", ["worker", "topic"]
)
CONSUMER_LAG = Gauge(
    "nearline_consumer_lag_records",
    "Records not yet consumed: the partition's high watermark minus this consumer's position, refreshed every "
    "few seconds for the partitions it owns.",
    ["worker", "topic", "partition"],
)
DEAD_LETTERS = Counter(
    "nearline_dead_letters_total",
    "Records dead-lettered, by stage and reason (the error's type name).",
    ["worker", "stage", "reason"],
)

# One batch step, 1 ms to 10 s: a GPU batch and a preprocess batch share a scale, so dashboards compare them
BATCH_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class _Serving:
    """The one endpoint of this process, and the worker kind its metrics are labelled with."""

    endpoint: MetricsEndpoint | None = None
    worker: str | None = None  # None while metrics are off: nothing is counted


_SERVING = _Serving()
_lock = threading.Lock()


def version() -> str:
    try:
        return importlib.metadata.version("nearline")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def serve_metrics(endpoint: MetricsEndpoint, worker: str) -> None:
    """Serve /metrics at `endpoint` in a daemon thread, label this process's metrics `worker` and
    set its build info (a GPU worker adds its model and engine once they are loaded).

    Once per process: a second call (bench.feed serves several drains in one process) only
    relabels."""
    with _lock:
        if _SERVING.endpoint != endpoint:
            start_server(endpoint)
            _SERVING.endpoint = endpoint
        _SERVING.worker = worker
    build_info(worker)


def serving_worker() -> str | None:
    """The worker kind metrics are served for, or None when they are off."""
    return _SERVING.worker


def build_info(worker: str, *, model: str = "", model_version: str = "", engine: str = "") -> None:
    """Set nearline_build_info to 1 for this worker (replacing any earlier label set)."""
    BUILD_INFO.clear()
    BUILD_INFO.labels(version(), worker, model, model_version, engine).set(1)


def count_dead_letter(stage: str, error: BaseException) -> None:
    """One dead letter made at `stage` (kafka_io.dead_letters makes them all). Dead letters are made
    deep in pure code, so this is the one metric kept per process rather than passed down: a
    process is one worker. A no-op while metrics are off."""
    worker = serving_worker()
    if worker is not None:
        DEAD_LETTERS.labels(worker, stage, type(error).__name__).inc()


class Traffic:
    """Records one worker consumed and produced, and its consumer lag: what every stage reports.

    Called once per poll window or batch, with counts; the counter children are kept per topic
    so that a call is one dict lookup and one increment."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._consumed: dict[str, Callable[[float], None]] = {}
        self._produced: dict[str, Callable[[float], None]] = {}
        self._lagging: set[TP] = set()

    def consumed(self, topic: str, records: int) -> None:
        inc = self._consumed.get(topic)
        if inc is None:
            inc = self._consumed[topic] = RECORDS_CONSUMED.labels(self.worker, topic).inc
        inc(records)

    def produced(self, topic: str, records: int) -> None:
        inc = self._produced.get(topic)
        if inc is None:
            inc = self._produced[topic] = RECORDS_PRODUCED.labels(self.worker, topic).inc
        inc(records)

    def produced_records(self, records: Sequence[OutRecord]) -> None:
        """Count a batch's outputs by topic (mostly one topic: counted without a dict per record)."""
        if not records:
            return
        first = records[0].topic
        others = [r.topic for r in records if r.topic != first]
        self.produced(first, len(records) - len(others))
        for topic in set(others):
            self.produced(topic, others.count(topic))

    def lag(self, lags: dict[TP, int]) -> None:
        """Set the lag of the partitions this worker owns now; drop those it no longer owns."""
        for topic, partition in self._lagging - set(lags):
            CONSUMER_LAG.remove(self.worker, topic, str(partition))
        for (topic, partition), records in lags.items():
            CONSUMER_LAG.labels(self.worker, topic, str(partition)).set(records)
        self._lagging = set(lags)


class Every:
    """True at most once per `seconds`: for refreshes driven by a loop that turns far more often."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self._clock = seconds, clock
        self._next = 0.0

    def due(self) -> bool:
        now = self._clock()
        if now < self._next:
            return False
        self._next = now + self.seconds
        return True


class RecentSums:
    """Sums of a few quantities over the last `window_s` seconds, in one-second buckets.

    For gauges of a recent ratio (engine busy, padding waste): adding is one list update per
    executed batch, and the ratio is computed only when a scrape asks for it."""

    def __init__(self, width: int, window_s: int = 60, clock: Callable[[], float] = time.monotonic) -> None:
        self.width, self.window_s, self._clock = width, window_s, clock
        self._buckets: deque[list[float]] = deque()  # [second, sum 1, sum 2, ...]
        self._lock = threading.Lock()
        self._started = clock()

    def add(self, *values: float) -> None:
        second = int(self._clock())
        with self._lock:
            if self._buckets and self._buckets[-1][0] == second:
                last = self._buckets[-1]
                for i, v in enumerate(values, 1):
                    last[i] += v
            else:
                self._buckets.append([second, *values])
                self._trim(second)

    def sums(self) -> tuple[list[float], float]:
        """The sums over the window, and the seconds it spans (less than window_s just after start)."""
        now = self._clock()
        with self._lock:
            self._trim(int(now))
            totals = [sum(b[i] for b in self._buckets) for i in range(1, self.width + 1)]
        return totals, max(1e-9, min(float(self.window_s), now - self._started))

    def _trim(self, second: int) -> None:
        while self._buckets and self._buckets[0][0] <= second - self.window_s:
            self._buckets.popleft()


class BulkHistogram:
    """A Prometheus histogram observed a numpy array at a time: one call per executed batch with
    every record's value, instead of a Python call per record (Histogram.observe)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        labelnames: Sequence[str],
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.bounds = np.array(sorted(buckets), dtype=np.float64)
        self._children: dict[tuple[str, ...], BulkHistogramChild] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def labels(self, *values: str) -> BulkHistogramChild:
        with self._lock:
            child = self._children.get(values)
            if child is None:
                child = self._children[values] = BulkHistogramChild(self.bounds)
            return child

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            children = list(self._children.items())
        for values, child in children:
            counts, total = child.snapshot()
            cumulative = np.cumsum(counts)
            buckets = [(floatToGoString(b), float(c)) for b, c in zip(self.bounds, cumulative[:-1], strict=True)]
            family.add_metric(list(values), [*buckets, ("+Inf", float(cumulative[-1]))], total)
        yield family


class BulkHistogramChild:
    def __init__(self, bounds: np.ndarray) -> None:
        self._bounds = bounds
        self._counts = np.zeros(len(bounds) + 1, dtype=np.int64)  # the last: above every bound
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe_many(self, values: np.ndarray) -> None:
        if not len(values):
            return
        # a value equal to a bound belongs to that bound's bucket (le: less or equal)
        counts = np.bincount(np.searchsorted(self._bounds, values, side="left"), minlength=len(self._counts))
        total = float(values.sum())
        with self._lock:
            self._counts += counts
            self._sum += total

    def snapshot(self) -> tuple[np.ndarray, float]:
        with self._lock:
            return self._counts.copy(), self._sum
