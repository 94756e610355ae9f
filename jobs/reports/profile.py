"""`nearline profile`: where a finished job's time went, from the stage timestamps its results carry."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from results.timings import STAGES, Timings
from schemas import InferenceResult

# A queue is long because the stage after it cannot keep up: blame that stage, and say which queue
# it is, or "bottleneck: inference (slowest stage: batching)" reads as a contradiction.
BLAME = {"wait for preprocess": "preprocess", "wait for inference": "inference", "batching": "inference"}
WAITING = {
    "wait for preprocess": "submitted records wait in the raw topic for a preprocess worker to take them",
    "wait for inference": "preprocessed records wait in the tensor topic for a GPU worker to poll them",
    "batching": "decoded poll windows wait for the engine to finish the batches before them",
}
REMEDY = {
    "preprocess": "more preprocess workers (nearline worker preprocess), or more CPUs for them",
    "inference": "a faster engine or accelerator, larger executed batches (--max-batch-size), or more GPU workers",
    "postprocess": "a GPU worker with more CPU to spare",
}


def bottleneck_reason(slowest: str, mean_ms: float) -> str:
    """Why the bottleneck is the stage named: the slowest stage, or the one a slow queue waits on."""
    blamed = BLAME.get(slowest, slowest)
    if slowest == blamed:
        why = f"the slowest stage itself, {mean_ms:.1f} ms a record on average"
    else:
        why = (
            f"the slowest stage is {slowest!r} ({mean_ms:.1f} ms a record on average), a queue: "
            f"{WAITING[slowest]}, so {blamed} is what cannot keep up"
        )
    remedy = REMEDY.get(blamed)
    return why + (f"; to go faster: {remedy}" if remedy else "")


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
    bottleneck_reason: str
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
        out.append(f"bottleneck: {self.bottleneck}: {self.bottleneck_reason}")
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


def as_timings(results: Timings | Iterable[InferenceResult]) -> Timings:
    return results if isinstance(results, Timings) else Timings.of(results)


def stage_samples_us(timings: Timings) -> dict[str, np.ndarray]:
    """Each stage's latency per record in µs, then "end to end", over the records with every stamp."""
    mask = timings.timed()
    ts = {k: column[mask] for k, column in timings.stamps().items()}
    samples = {name: np.maximum(ts[b] - ts[a], 0) for name, a, b in STAGES}
    samples["end to end"] = ts["result_produced"] - ts["submitted"]
    return samples


def profile(results: Timings | Iterable[InferenceResult]) -> Profile:
    timings = as_timings(results)
    mask = timings.timed()
    if not mask.any():
        raise ValueError("no results with stage timestamps")
    samples = stage_samples_us(timings)
    stages = {name: Latency.of(samples[name]) for name, _, _ in STAGES}
    ts = {k: column[mask] for k, column in timings.stamps().items()}
    batch, batch_size, length, padded = timings.ints()[mask].T
    wall_us = int(ts["result_produced"].max() - ts["submitted"].min())
    # one row per batch: the last record's stamps and size stand for it, as a dict by batch id did
    _, last = np.unique(batch[::-1], return_index=True)
    last = len(batch) - 1 - last
    busy = busy_time_us(zip(ts["inference_start"][last].tolist(), ts["inference_end"][last].tolist(), strict=True))
    slowest = max(stages, key=lambda s: stages[s].mean_ms)
    sizes, counts = np.unique(batch_size[last], return_counts=True)
    padded_total = int(padded.sum())
    records = int(mask.sum())
    return Profile(
        records=records,
        wall_s=wall_us / 1e6,
        records_per_s=records / (wall_us / 1e6) if wall_us else 0.0,
        stages=stages,
        end_to_end=Latency.of(samples["end to end"]),
        slowest_stage=slowest,
        bottleneck=BLAME.get(slowest, slowest),
        bottleneck_reason=bottleneck_reason(slowest, stages[slowest].mean_ms),
        engine_busy_fraction=busy / wall_us if wall_us else 0.0,
        batches=len(last),
        mean_batch_size=records / len(last),
        batch_sizes={int(size): int(n) for size, n in zip(sizes, counts, strict=True)},
        padding_waste=1 - int(length.sum()) / padded_total if padded_total else 0.0,
    )
