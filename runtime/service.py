"""What every long-running worker does around its loop: SIGTERM and SIGINT ask it to stop (after
its current step, committing what it took; never mid-step), and its lines on stderr begin with
the time."""

from __future__ import annotations

import signal
import sys
import threading
from datetime import UTC, datetime


def stop_on_signals() -> threading.Event:
    """An event that SIGTERM or SIGINT sets: the worker's loop checks it between steps. Called on
    the main thread (Python's signal handlers live there)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    return stop


def say_stamped(line: str) -> None:
    """One line of a worker's log on stderr, after the time in UTC."""
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} {line}", file=sys.stderr, flush=True)
