"""The engine stand-ins of bench/feed.py: a simulated accelerator that computes by the clock,
and a wrapper that times any engine the way the GPU worker waits on it."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpu_consumer.device_postprocess import device_steps
from gpu_consumer.engines.factory import make_engine
from gpu_consumer.engines.protocol import Engine, infer_all
from model_repository.config import ModelConfig


@dataclass
class SimulatedAccelerator(Engine):
    """A device that computes each executed batch in per_call_s + rows / rate seconds (at once at
    rate 0), driven as the torch and TensorRT engines drive a GPU stream (cuda_staging.pipelined):
    `infer_many` queues batch n+1 before it waits for batch n's outputs, so the device goes on
    from one batch to the next without waiting for Python. Its clock is kept arithmetically (a
    batch starts when it is queued or when the one before it ends, whichever is later) and the
    caller sleeps until its batch's end: a sleep releases the GIL and uses no CPU, as waiting on a
    GPU does. `infer` alone queues nothing ahead. Outputs have the model's shape (pooled, as the
    GPU engines return them) and are reused per shape: allocating them is not the loop's cost.

    Its busy time is the sum of the batches' compute: time measured around the calls would also
    count the wait for the GIL after each sleep, which a GPU does not spend computing."""

    config: ModelConfig
    rate: float
    per_call_s: float
    name: str = "simulated"
    pad_to_bucket: bool = False
    postprocessed: tuple[str, ...] = ()
    max_batch_size: int = 0
    device_s: float = 0.0
    _outputs: dict[tuple[int, int], dict[str, np.ndarray]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.max_batch_size = self.config.max_batch_size
        self.postprocessed = device_steps(self.config)  # pools on the device, as torch and TensorRT do

    def warmup(self) -> None:
        pass

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return next(self.infer_many([inputs]))

    def infer_many(self, batches: Iterable[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
        free_at = 0.0  # when the device finishes the batches queued so far
        pending: tuple[float, dict[str, np.ndarray]] | None = None
        for inputs in batches:
            free_at = max(time.perf_counter(), free_at) + self._compute(inputs)
            if pending is not None:
                yield self._collect(*pending)
            pending = (free_at, inputs)
        if pending is not None:
            yield self._collect(*pending)

    def _compute(self, inputs: dict[str, np.ndarray]) -> float:
        rows = len(next(iter(inputs.values())))
        seconds = self.per_call_s + rows / self.rate if self.rate else 0.0
        self.device_s += seconds
        return seconds

    def _collect(self, done_at: float, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        wait = done_at - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        rows, width = next(iter(inputs.values())).shape[:2]
        out = self._outputs.get((rows, width))
        if out is None:
            spec = self.config.outputs[0]
            shape = (rows, int(spec.dims[-1])) if self.postprocessed else (rows, width, int(spec.dims[-1]))
            out = {spec.name: np.ones(shape, np.float32)}
            self._outputs[(rows, width)] = out
        return out


@dataclass
class TimedEngine(Engine):
    """Any engine, with the time the worker waits on it: inside `infer`, or inside each step of
    `infer_many` for engines that overlap copies with compute (torch on CUDA)."""

    inner: Engine
    label: str
    busy_s: float = 0.0
    first_start: float = 0.0
    last_end: float = 0.0
    sizes: Counter[int] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.name, self.max_batch_size, self.pad_to_bucket, self.postprocessed = (
            self.inner.name,
            self.inner.max_batch_size,
            self.inner.pad_to_bucket,
            self.inner.postprocessed,
        )

    def __getattr__(self, name: str) -> Any:
        """Whatever else the engine has (its device, precision or providers: the runtime its
        results are cached under, gpu_consumer/cache_writes.py runtime_of) is the inner one's."""
        if name == "inner":  # not set yet (a copy being made): not the inner engine's to answer
            raise AttributeError(name)
        return getattr(self.inner, name)

    def warmup(self) -> None:
        self.inner.warmup()

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return next(self.infer_many([inputs]))

    def infer_many(self, batches: Iterable[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
        batches = list(batches)
        outputs = infer_all(self.inner, batches)
        for inputs in batches:
            start = time.perf_counter()
            out = next(outputs)
            end = time.perf_counter()
            self.first_start = self.first_start or start
            self.last_end = end
            self.busy_s += end - start
            self.sizes[len(next(iter(inputs.values())))] += 1
            yield out


def stand_ins(config: ModelConfig, rates: list[float], per_call_s: float, real: list[str]) -> Iterator[TimedEngine]:
    for rate in rates:
        label = f"simulated {rate:,.0f} rec/s" if rate else "zero-cost"
        yield TimedEngine(SimulatedAccelerator(config, rate, per_call_s), label)
    for kind in real:
        engine = make_engine(config, kind)
        yield TimedEngine(engine, f"real {engine.name} ({getattr(engine, 'device', 'cpu')})")
