"""The prompts a GenerationStep has submitted and not finished, and the engine that runs them.

The main thread adds prompts and cancels them; the emit thread finishes them and, when the engine
fails, replaces it.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

from gpu_consumer.engines.generation_protocol import GenerationEngine
from gpu_consumer.generation.requests import GenerationRequest
from gpu_consumer.ledger import Entry
from gpu_consumer.window_inference import Item
from kafka_io.records import OutRecord
from kafka_io.topology import Lane


@dataclass(eq=False)
class Window:
    """A polled window while its prompts generate: sealed once none of them is waiting."""

    entry: Entry
    formed_us: int
    window_id: str
    waiting: int  # records submitted and not finished
    lane: Lane


@dataclass(eq=False)
class Running:
    """One prompt submitted to the engine and not finished."""

    window: Window
    item: Item
    request: GenerationRequest  # kept to run it again on a new engine (isolation)
    started_us: int


class InFlight:
    """What the main thread and the emit thread share: `running`, `isolating`, `deferred` and a
    window's `waiting` change under `lock`; `to_emit` is the main thread's hand-over to the emit
    thread (dead letters, windows to seal)."""

    def __init__(self, engine: GenerationEngine) -> None:
        self.lock = threading.Lock()
        self.engine = engine
        self.replaced = False  # the engine in use was made here (close() closes it)
        self.running: dict[str, Running] = {}  # by engine key
        self.isolating = False  # a new engine runs the failed one's prompts one at a time
        self.deferred: list[GenerationRequest] = []  # prompts polled meanwhile, submitted after
        self.to_emit: queue.Queue[tuple[Window, list[OutRecord]] | None] = queue.Queue()

    def finished(self, window: Window) -> None:
        """One of the window's prompts is done (a result, a dead letter, cancelled)."""
        with self.lock:
            window.waiting -= 1
            done = window.waiting == 0
        if done:
            self.to_emit.put((window, []))  # seals it once what was handed before is produced
