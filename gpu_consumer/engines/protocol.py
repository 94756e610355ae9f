"""The engine seam: the one narrow protocol every backend implements (onnxruntime_engine.py,
torch_engine.py, tensorrt_engine.py); factory.py picks one."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Protocol

import numpy as np


class Engine(Protocol):
    name: str
    max_batch_size: int
    # True for static-shape engines (TensorRT profiles, CUDA graphs): text batches are padded to
    # the model's length bucket instead of the longest record, so each shape is built once.
    pad_to_bucket: bool
    # The model's postprocess steps (mean_pooling, l2_normalize...) this engine already ran on
    # its device, so it returns [B, H] and the worker does not copy back [B, L, H] to pool.
    postprocessed: tuple[str, ...]
    # Rounds of the cost model's probes (cost_model.measure: best of each shape): wall-clock
    # probes need several, as start-up contention spoils some; an engine whose probes are timed
    # in CPU time needs fewer.
    probe_rounds: int = 5

    def warmup(self) -> None:
        """Run once at the largest shape, so a bad engine fails at start-up, not mid-poll."""

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Batched graph inputs in, graph outputs by name out."""
        ...

    def infer_many(self, batches: Iterable[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
        """Outputs per batch, in order. Engines that can queue the next batch's copy-in while one
        computes (torch on CUDA, TensorRT) override this; the rest run one batch after another."""
        for inputs in batches:
            yield self.infer(inputs)

    def time_batch(self, inputs: dict[str, np.ndarray]) -> float:
        """Seconds one batch costs this engine, as the planner should count them (the cost model's
        probes): the wall time of `infer` here, which is what a GPU's batches cost."""
        start = time.perf_counter()
        self.infer(inputs)
        return time.perf_counter() - start


class EngineLoadError(RuntimeError):
    """The engine cannot start: the worker exits and the records stay in Kafka."""


def infer_all(engine: Engine, batches: list[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
    """Outputs per batch; engines that can overlap the next batch's copy-in with compute do."""
    return iter(engine.infer_many(batches))
