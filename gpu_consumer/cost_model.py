"""What an executed batch costs on this engine, so the planner cuts batches where an accelerator
would: seconds = per_call + per_row * rows + per_token * rows * padded width.

On a GPU the per-call cost (launch, copy, sync) dominates small batches, so a few percent more
padding in a full batch is cheaper than two small ones; on a CPU, compute is per token and padding
costs as much as real tokens. The numbers come from timing the engine at warm-up (fit), or from
the operator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CostModel:
    per_call_s: float
    per_row_s: float = 0.0
    per_token_s: float = 0.0

    def seconds(self, rows: int, width: int) -> float:
        return self.per_call_s + self.per_row_s * rows + self.per_token_s * rows * width

    def worth_widening(self, rows: int, width: int, new_width: int) -> bool:
        """Whether a batch of `rows` at `width` should take a record that pads it to new_width,
        rather than leave it to the next batch: the padding that adds costs less than a call."""
        return self.per_token_s * rows * (new_width - width) <= self.per_call_s


# (rows, width) shapes timed at warm-up: they separate the three terms and stay cheap on a CPU.
PROBES = ((1, 8), (8, 8), (8, 32), (16, 32))


def fit(samples: Sequence[tuple[int, int, float]]) -> CostModel:
    """Least squares over (rows, width, seconds) samples, each term kept >= 0."""
    a = np.array([[1.0, rows, rows * width] for rows, width, _ in samples])
    b = np.array([seconds for _, _, seconds in samples])
    coef, *_ = np.linalg.lstsq(a, b, rcond=None)
    per_call, per_row, per_token = (max(0.0, float(c)) for c in coef)
    return CostModel(per_call, per_row, per_token)


def measure(
    run: Callable[[int, int], object], repeats: int = 3, probes: Sequence[tuple[int, int]] = PROBES
) -> CostModel:
    """Time run(rows, width) at each probe shape (best of `repeats`: noise only adds) and fit."""
    samples = []
    for rows, width in probes:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            run(rows, width)
            best = min(best, time.perf_counter() - start)
        samples.append((rows, width, best))
    return fit(samples)
