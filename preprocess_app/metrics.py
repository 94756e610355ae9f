"""What the preprocess worker measures for Prometheus, once per batch of raw records.

Every count is of records: a pack counts the records its `records` header names (schemas/packs.py).

Records consumed and produced per topic, seconds per batch, whether backpressure holds the worker
(--max-tensor-lag), and every few seconds the consumer lag of the raw topics faust reads. Without
--metrics-port the app holds the base PreprocessMetrics, whose methods do nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from kafka_io.metrics import BATCH_SECONDS_BUCKETS, Traffic, serve_metrics
from kafka_io.records import OutRecord, records_of
from runtime.metrics_endpoint import MetricsEndpoint

log = logging.getLogger(__name__)

WORKER = "preprocess"
LAG_EVERY_S = 5.0

PREPROCESS_SECONDS = Histogram(
    "nearline_preprocess_seconds",
    "Seconds to preprocess one batch of raw records (tokenize, or decode and resize), by raw topic.",
    ["topic"],
    buckets=BATCH_SECONDS_BUCKETS,
)
LANE_RECORDS = Counter(
    "nearline_preprocess_lane_records",
    "Raw records preprocessed, by priority lane (live, bulk): what each lane got of the worker.",
    ["lane"],
)
BACKPRESSURE_PAUSED = Gauge(
    "nearline_backpressure_paused",
    "1 while preprocessing waits for a GPU group that lags more than --max-tensor-lag records, else 0.",
)


class PreprocessMetrics:
    """What the preprocess worker reports. This base reports nothing: the worker without --metrics-port."""

    def batch(self, topic: str, consumed: int, seconds: float, lane: str = "bulk") -> None:
        """A batch of `consumed` raw records from `topic`, preprocessed in `seconds`."""

    def produced(self, records: Sequence[OutRecord]) -> None:
        """A batch's outputs, confirmed by the broker."""

    def paused(self, paused: bool) -> None:
        """Backpressure holds the worker, or no longer does."""

    async def refresh_lag(self, consumer: Any) -> None:
        """The lag of the partitions faust's consumer owns (every LAG_EVERY_S, from a faust timer)."""


class PrometheusPreprocessMetrics(PreprocessMetrics):
    def __init__(self) -> None:
        self.traffic = Traffic(WORKER)
        BACKPRESSURE_PAUSED.set(0)

    def batch(self, topic: str, consumed: int, seconds: float, lane: str = "bulk") -> None:
        self.traffic.consumed(topic, consumed)
        PREPROCESS_SECONDS.labels(topic).observe(seconds)
        # the lane as a label of its own, so a dashboard sums each lane across kinds
        LANE_RECORDS.labels(lane).inc(consumed)

    def produced(self, records: Sequence[OutRecord]) -> None:
        # records, not Kafka records: a tensor pack counts its `records` header, a dead letter 1
        counts: dict[str, int] = {}
        for r in records:
            counts[r.topic] = counts.get(r.topic, 0) + records_of(r.headers)
        for topic, n in counts.items():
            self.traffic.produced(topic, n)

    def paused(self, paused: bool) -> None:
        BACKPRESSURE_PAUSED.set(1 if paused else 0)

    async def refresh_lag(self, consumer: Any) -> None:
        """High watermark (from the last fetch) minus position, per assigned partition. faust's
        consumer is aiokafka underneath: both are known locally once a partition was fetched."""
        lags: dict[tuple[str, int], int] = {}
        try:
            for tp in consumer.assignment():
                high = consumer.highwater(tp)
                position = await consumer.position(tp)
                if high is not None and position is not None and high >= 0 and position >= 0:
                    lags[(tp.topic, tp.partition)] = max(0, high - position)
        except Exception as exc:  # a rebalance under way: the next refresh reads the new assignment
            log.debug("consumer lag not refreshed: %s", exc)
            return
        self.traffic.lag(lags)


def preprocess_metrics(endpoint: MetricsEndpoint | None) -> PreprocessMetrics:
    """Serve /metrics at `endpoint`, or report nothing when None."""
    if endpoint is None:
        return PreprocessMetrics()
    serve_metrics(endpoint, WORKER)
    return PrometheusPreprocessMetrics()
