"""The tests' one way to wait for something to happen: poll a condition until it holds, or fail
saying what was awaited, for how long, and the last value seen. A bound on a wait, never a timing:
the test goes on the moment the condition holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout_s: float,
    what: str | Callable[[], str],
    *,
    until: Callable[[T], object] = bool,
    every_s: float = 0.05,
    meanwhile: Callable[[], object] | None = None,
) -> T:
    """Call `condition` until `until(value)` holds (by default: the value is truthy) and return that
    value; past `timeout_s`, fail with `what` (or what it returns then: a log's tail) and the last
    value. `meanwhile` runs between tries (e.g. a pipeline's `check_workers`, so a dead worker
    fails the test at once, not at the bound)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if until(value):
            return value
        if time.monotonic() >= deadline:
            awaited = what() if callable(what) else what
            pytest.fail(f"not within {timeout_s:g} s: {awaited} (last seen: {_shown(value)})")
        if meanwhile is not None:
            meanwhile()
        time.sleep(every_s)


def _shown(value: object, ends: int = 600) -> str:
    """The value's repr, its two ends only when long (a log's news is at its end, a list's at its start)."""
    text = repr(value)
    if len(text) <= 2 * ends:
        return text
    return f"{text[:ends]} ... [{len(text) - 2 * ends} characters] ... {text[-ends:]}"
