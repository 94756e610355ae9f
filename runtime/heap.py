"""The cyclic garbage collector tuned for a process that has started: what it keeps from start-up
is never scanned again, and young objects are collected in larger sweeps.

Python's collector scans every container object at each full collection, and a young collection
runs every 700 net allocations. A nearline process allocates a few container objects per record
(a consumed record, its result's fields, a row to keep) and frees most of them at once, while
holding everything its imports made (click, numpy, confluent-kafka; torch and transformers in a
worker: millions of objects). Measured on the 2-core VM, `nearline results` of 30,000 MiniLM
results: 37-43 CPU us a record with the default collector, 30-34 with it off (bench/HISTORY.md);
gc.freeze() and a larger first threshold keep most of that while still collecting cycles.
"""

from __future__ import annotations

import gc

# Net allocations of container objects between young collections (Python's default: 700). A
# young collection then scans up to this many objects, ~1-2 ms, instead of 70 small sweeps.
YOUNG_THRESHOLD = 50_000


_enabled = [False]


def settle_heaps_here() -> None:
    """Let settle_heap act in this process: the `nearline` entry point's call alone, so that a test
    or a benchmark that runs a command or a worker inside its own process keeps its collector."""
    _enabled[0] = True


def settle_heap() -> None:
    """Move every object alive now out of the collector's reach (gc.freeze: they are start-up's,
    kept for the process's life) and collect young objects less often. Called where a process's
    start-up is done (a command's imports, a worker's engine or tokenizers); nothing unless
    settle_heaps_here() was called."""
    if not _enabled[0]:
        return
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
