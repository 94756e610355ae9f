"""Poison isolation: when the engine fails on a batch, find the records that make it fail.

A failing batch is split in halves until each failure is pinned to single records; the rest of
the batch still gets results. Faults that are nobody's record (out of memory, a broken device)
are re-raised instead: the worker exits and Kafka redelivers the window to a healthy one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

FAULT_MARKERS = ("out of memory", "cuda error", "cudnn_status", "device-side assert", "cublas_status")


class EngineFault(RuntimeError):
    """The engine fails whatever it is given: not the records' fault."""


def is_fault(error: BaseException) -> bool:
    """Errors that say the engine or the machine is broken, whatever the input."""
    if isinstance(error, MemoryError | EngineFault):
        return True
    text = str(error).lower()
    return any(marker in text for marker in FAULT_MARKERS)


def bisect(
    run: Callable[[list[int]], T], rows: list[int]
) -> tuple[list[tuple[list[int], T]], list[tuple[int, Exception]]]:
    """Run `rows`; on failure, run each half, down to single rows. Returns (succeeded groups with
    their outputs, failed single rows with their errors). Faults propagate at once."""
    try:
        return [(rows, run(rows))], []
    except Exception as exc:
        if is_fault(exc):
            raise
        if len(rows) == 1:
            return [], [(rows[0], exc)]
    middle = len(rows) // 2
    good_left, bad_left = bisect(run, rows[:middle])
    good_right, bad_right = bisect(run, rows[middle:])
    return good_left + good_right, bad_left + bad_right
