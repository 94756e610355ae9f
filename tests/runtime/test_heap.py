"""settle_heap: what is alive when a process has started is out of the collector's reach, cycles
made later are still collected, and young objects are collected in larger sweeps."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime.heap import YOUNG_THRESHOLD

SCRIPT = """
import gc, weakref
from runtime.heap import YOUNG_THRESHOLD, settle_heap, settle_heaps_here

class Node:
    pass

before = Node()
before.self = before  # a cycle from start-up: frozen, never collected
settle_heap()
assert gc.get_freeze_count() == 0  # not a process of nearline's own: left as it is
settle_heaps_here()
settle_heap()
assert gc.get_freeze_count() > 0
assert gc.get_threshold()[0] == YOUNG_THRESHOLD
frozen = gc.get_freeze_count()
later = Node()
later.self = later  # a cycle made while working: still collected
alive = weakref.ref(later)
del later
gc.collect()
assert alive() is None
assert gc.get_freeze_count() == frozen
print("ok")
"""


@pytest.mark.process
def test_start_up_objects_are_frozen_and_later_cycles_still_collected() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.process
def test_every_nearline_command_settles_its_heap_before_its_work() -> None:
    """The entry point's root group settles the heap after the command's module is imported (and
    only the entry point: `cli` run inside a test's process leaves its collector alone)."""
    code = """
import gc, sys
from unittest import mock
import runtime.heap as heap

calls = []
real = heap.settle_heap
patch = mock.patch("jobs.cli.main.settle_heap", side_effect=lambda: calls.append(sorted(sys.modules)) or real())
patch.start()
from jobs.cli import main

sys.argv = ["nearline", "jobs", "list", "--help"]
try:
    main()
except SystemExit:
    pass
assert calls and "jobs.cli.job_watch" in calls[0], calls
print(gc.get_threshold()[0])

"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == YOUNG_THRESHOLD
