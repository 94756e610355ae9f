"""What an executed batch costs on this engine, so the planner cuts batches where an accelerator
would: seconds = per_call + per_row * rows + per_token * rows * padded width.

On a GPU the per-call cost (launch, copy, sync) dominates small batches, so a few percent more
padding in a full batch is cheaper than two small ones; on a CPU, compute is per token and padding
costs as much as real tokens. The numbers come from timing the engine at warm-up (fit), or from
the operator.
"""

from __future__ import annotations

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


# (rows, width) shapes timed at warm-up: two row counts by two widths, so each term has a contrast
# of its own, and the per-token one is 192 tokens at 8 rows: start-up contention drowned a 32-token
# contrast, fitting no per-token cost (every batch then widened). Cheap on a CPU, where the probes
# are real compute beside the preprocess worker's: 0.4 s for MiniLM on two cores, where
# (1,8), (8,8), (8,32), (16,32) took 0.8-1.0 s and, under bursty load, once fitted no per-call cost.
PROBES = ((1, 8), (1, 32), (8, 8), (8, 32))


def fit(samples: Sequence[tuple[int, int, float]]) -> CostModel:
    """Least squares over (rows, width, seconds) samples, each term kept >= 0."""
    a = np.array([[1.0, rows, rows * width] for rows, width, _ in samples])
    b = np.array([seconds for _, _, seconds in samples])
    coef, *_ = np.linalg.lstsq(a, b, rcond=None)
    per_call, per_row, per_token = (max(0.0, float(c)) for c in coef)
    return CostModel(per_call, per_row, per_token)


def measure(
    timed: Callable[[int, int], float],
    rounds: int = 5,
    probes: Sequence[tuple[int, int]] = PROBES,
) -> CostModel:
    """Seconds of timed(rows, width) at each probe shape, best of `rounds` (noise only adds), fitted.

    The probes are taken in rounds, each shape once a round, so a burst of contention (at start-up
    the preprocess worker and the broker start on the same cores) spoils one round of every shape
    rather than every try of one. Every try of the smallest probe spoiled inflates the per-call
    term, and with it the padding the planner accepts: a 50-text job on the CPU ran as batches of
    46 and 4 (300-330 ms) instead of 21, 23, 5 and 1 (240-290 ms). (On the CPU the engine times
    its probes in CPU time, which contention hardly touches: Engine.time_batch.)"""
    best = [float("inf")] * len(probes)
    for _ in range(rounds):
        for k, (rows, width) in enumerate(probes):
            best[k] = min(best[k], timed(rows, width))
    return fit([(rows, width, seconds) for (rows, width), seconds in zip(probes, best, strict=True)])
