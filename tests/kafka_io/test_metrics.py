"""The shared metric pieces, on prometheus_client's own registries and exposition (no broker)."""

from __future__ import annotations

import uuid

import numpy as np
from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest

from kafka_io.metrics import BulkHistogram, Every, RecentSums, Traffic
from kafka_io.records import OutRecord

BOUNDS = (0.1, 0.5, 1.0, 5.0)


def samples(registry: CollectorRegistry, name: str) -> list[str]:
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if line.startswith(name + "_") and not line.startswith(name + "_created")]


def test_a_bulk_histogram_exposes_what_one_observe_per_value_does() -> None:
    values = np.array([0.0, 0.05, 0.1, 0.1000001, 0.5, 0.7, 1.0, 4.9, 5.0, 5.1, 100.0, 3.25])
    one_by_one, bulk = CollectorRegistry(), CollectorRegistry()
    histogram = Histogram("x_seconds", "x", ["model"], buckets=BOUNDS, registry=one_by_one)
    for v in values:
        histogram.labels("m").observe(float(v))
    bulk_histogram = BulkHistogram("x_seconds", "x", BOUNDS, ["model"], registry=bulk)
    bulk_histogram.labels("m").observe_many(values[:5])
    bulk_histogram.labels("m").observe_many(values[5:])  # the same child again: observations add up
    assert samples(bulk, "x_seconds") == samples(one_by_one, "x_seconds")
    assert 'x_seconds_bucket{le="0.1",model="m"} 3.0' in samples(bulk, "x_seconds")  # le: a bound's own value counts


def test_recent_sums_keep_the_last_window_only() -> None:
    now = [1000.0]
    recent = RecentSums(2, window_s=60, clock=lambda: now[0])
    recent.add(1.0, 10)
    now[0] += 0.5
    recent.add(2.0, 20)  # same second: one bucket
    now[0] += 30
    recent.add(4.0, 40)
    assert recent.sums() == ([7.0, 70.0], 30.5)  # spans only the time since it started
    now[0] += 40  # the first second is now over 60 s old
    assert recent.sums() == ([4.0, 40.0], 60.0)
    now[0] += 60
    assert recent.sums() == ([0.0, 0.0], 60.0)


def test_every_is_due_once_per_period() -> None:
    now = [0.0]
    every = Every(5.0, clock=lambda: now[0])
    due = []
    for _ in range(12):
        due.append(every.due())
        now[0] += 1.0
    assert due == [True, False, False, False, False, True, False, False, False, False, True, False]


def test_traffic_counts_records_by_topic_and_drops_the_lag_of_partitions_given_away() -> None:
    worker = f"unit-{uuid.uuid4().hex[:8]}"
    traffic = Traffic(worker)
    traffic.consumed("in", 5)
    traffic.consumed("in", 3)
    traffic.produced_records([OutRecord("out", b"")] * 4 + [OutRecord("dead", b""), OutRecord("out", b"")])
    traffic.produced_records([OutRecord("dead", b"")])

    def value(name: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"worker": worker, **labels})

    assert value("nearline_records_consumed_total", topic="in") == 8
    assert value("nearline_records_produced_total", topic="out") == 5
    assert value("nearline_records_produced_total", topic="dead") == 2
    traffic.lag({("in", 0): 7, ("in", 1): 0})
    traffic.lag({("in", 1): 3})
    assert value("nearline_consumer_lag_records", topic="in", partition="0") is None
    assert value("nearline_consumer_lag_records", topic="in", partition="1") == 3
