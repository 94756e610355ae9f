"""`nearline profile`: where a finished job's time went, from the stage timestamps its results carry."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from schemas import InferenceResult

# (name, from timestamp, to timestamp): consecutive, so they add up to end to end.
STAGES = (
    ("wait for preprocess", "submitted", "preprocess_start"),
    ("preprocess", "preprocess_start", "preprocess_end"),
    ("wait for inference", "preprocess_end", "batch_formed"),
    ("batching", "batch_formed", "inference_start"),
    ("inference", "inference_start", "inference_end"),
    ("postprocess", "inference_end", "result_produced"),
)
# A queue is long because the stage after it cannot keep up: blame that stage.
BLAME = {"wait for preprocess": "preprocess", "wait for inference": "inference", "batching": "inference"}


@dataclass(frozen=True)
class Latency:
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float

    @classmethod
    def of(cls, micros: np.ndarray) -> Latency:
        ms = micros / 1000.0
        p50, p95, p99 = np.percentile(ms, [50, 95, 99])
        return cls(float(p50), float(p95), float(p99), float(ms.mean()))


@dataclass(frozen=True)
class Profile:
    records: int
    wall_s: float
    records_per_s: float
    stages: dict[str, Latency]
    end_to_end: Latency
    slowest_stage: str
    bottleneck: str
    engine_busy_fraction: float
    batches: int
    mean_batch_size: float
    batch_sizes: dict[int, int]
    padding_waste: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def lines(self) -> list[str]:
        out = [
            f"{self.records} records in {self.wall_s:.2f} s ({self.records_per_s:.1f} records/s), "
            f"{self.batches} batches, mean batch size {self.mean_batch_size:.1f}",
            f"{'stage':<22}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}{'mean ms':>10}",
        ]
        for name, lat in [*self.stages.items(), ("end to end", self.end_to_end)]:
            out.append(f"{name:<22}{lat.p50_ms:>10.1f}{lat.p95_ms:>10.1f}{lat.p99_ms:>10.1f}{lat.mean_ms:>10.1f}")
        out.append(f"bottleneck: {self.bottleneck} (slowest stage: {self.slowest_stage})")
        out.append(f"engine busy fraction: {self.engine_busy_fraction:.1%} of the job's wall time")
        if self.padding_waste:
            out.append(f"padding waste: {self.padding_waste:.1%} of the tokens the engine ran")
        return out


def busy_time_us(intervals: Iterable[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals: time the engine was executing something."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def timed(results: Iterable[InferenceResult]) -> list[InferenceResult]:
    """The results that carry every stage timestamp."""
    return [r for r in results if all(k in r.timestamps for _, a, b in STAGES for k in (a, b))]


def stage_samples_us(rows: list[InferenceResult]) -> dict[str, np.ndarray]:
    """Each stage's latency per record in µs, then "end to end"; rows as timed() returns them."""
    ts = {
        key: np.array([r.timestamps[key] for r in rows], dtype=np.int64) for key in {k for s in STAGES for k in s[1:]}
    }
    samples = {name: np.maximum(ts[b] - ts[a], 0) for name, a, b in STAGES}
    samples["end to end"] = ts["result_produced"] - ts["submitted"]
    return samples


def profile(results: Iterable[InferenceResult]) -> Profile:
    rows = timed(results)
    if not rows:
        raise ValueError("no results with stage timestamps")
    samples = stage_samples_us(rows)
    stages = {name: Latency.of(samples[name]) for name, _, _ in STAGES}
    wall_us = max(r.timestamps["result_produced"] for r in rows) - min(r.timestamps["submitted"] for r in rows)
    batches = {r.batch_id: r for r in rows}
    busy = busy_time_us((r.timestamps["inference_start"], r.timestamps["inference_end"]) for r in batches.values())
    slowest = max(stages, key=lambda s: stages[s].mean_ms)
    padded = sum(r.padded_length for r in rows)
    return Profile(
        records=len(rows),
        wall_s=wall_us / 1e6,
        records_per_s=len(rows) / (wall_us / 1e6) if wall_us else 0.0,
        stages=stages,
        end_to_end=Latency.of(samples["end to end"]),
        slowest_stage=slowest,
        bottleneck=BLAME.get(slowest, slowest),
        engine_busy_fraction=busy / wall_us if wall_us else 0.0,
        batches=len(batches),
        mean_batch_size=len(rows) / len(batches),
        batch_sizes=dict(sorted(Counter(r.batch_size for r in batches.values()).items())),
        padding_waste=1 - sum(r.length for r in rows) / padded if padded else 0.0,
    )
