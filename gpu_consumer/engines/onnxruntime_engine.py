"""The ONNX Runtime backend: the CPU engine here, and CUDA/TensorRT through its own execution
providers where its build has them."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from gpu_consumer.batcher import edge_batches, warmup_batch
from gpu_consumer.engines.protocol import Engine, EngineLoadError
from model_repository.config import ModelConfig
from runtime.cpus import usable_cpus

log = logging.getLogger(__name__)


# Tried in this order; ONNX Runtime silently skips providers whose libraries are absent, so the
# list is filtered by what this build reports as available.
PREFERRED_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


class OnnxRuntimeEngine(Engine):
    name = "onnxruntime"
    pad_to_bucket = False  # dynamic axes: the longest record of the batch is the cheapest width
    postprocessed: tuple[str, ...] = ()

    def __init__(self, config: ModelConfig, threads: int = 0) -> None:
        import onnxruntime as ort

        self.config = config
        self.max_batch_size = config.max_batch_size
        available = set(ort.get_available_providers())
        self.providers = [p for p in PREFERRED_PROVIDERS if p in available]
        # 0: every CPU this process may use (a pod's CPU limit, not the node's cores)
        cpus = threads or usable_cpus()
        self._session = self._load(cpus)
        self._outputs = [o.name for o in self._session.get_outputs()]
        # On the CPU, the batches of a window run side by side, one core each, rather than one
        # after another on every core: a batch split over cores waits at each operator for its
        # slowest core, so a core taken by the tokenizer or the broker for a few ms stalls the
        # others too. A lone batch still gets every core.
        self.lanes = cpus if self.providers == ["CPUExecutionProvider"] else 1
        if self.providers == ["CPUExecutionProvider"]:
            # time_batch counts CPU time here: two rounds fit as steadily as five (7.1-8.1 tokens
            # per call against 7.0-7.7, quiet or beside two CPU burners) for 0.19 s of a core
            # instead of 0.48 s, at the start of every worker, when `nearline run` has none to spare.
            self.probe_rounds = 2
        self._lane_pool: ThreadPoolExecutor | None = None
        if self.lanes > 1:
            self._lane_session = self._load(1)
            self._lane_pool = ThreadPoolExecutor(self.lanes, thread_name_prefix="onnxruntime-lane")
        log.info("onnxruntime engine for %s:%s on %s", config.name, config.version, self.providers)

    def _load(self, threads: int) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # A pool thread that finishes its share of an operator spins for the next one by default,
        # burning a core that this worker's Kafka threads, the lanes and (in `nearline run`) the
        # preprocess worker need; without spinning the engine alone is as fast (bench.run_ratio
        # measures the run, bench/HISTORY.md has the figures).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            return ort.InferenceSession(str(self.config.onnx_path), options, providers=self.providers)
        except Exception as exc:  # ORT raises its own exception types for a missing or broken file
            raise EngineLoadError(f"cannot load {self.config.onnx_path}: {exc}") from exc

    def warmup(self) -> None:
        if self.providers == ["CPUExecutionProvider"]:
            # On the CPU the largest batch (64 x 256 tokens for MiniLM) takes seconds of every
            # core at start-up, while `nearline run` is starting the preprocess worker on the same
            # cores, and memory is taken per call anyway: each dimension at its largest is enough
            # to fail a broken engine now. A GPU provider's memory is checked at the largest shape.
            batches = edge_batches(self.config)
            for batch in batches:
                self.infer(batch.inputs)
            if self.lanes > 1:
                # the same graph, whose largest shapes were just checked: that it runs is enough.
                # One row costs ms; the edge batches took 0.28 s of a core for MiniLM.
                self._lane_run({name: array[:1] for name, array in batches[0].inputs.items()})
            return
        self.infer(warmup_batch(self.config).inputs)

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self._outputs, self._session.run(self._outputs, inputs), strict=True))

    def infer_many(self, batches: Iterable[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
        planned = list(batches)
        if self._lane_pool is None or not balanced(planned, self.lanes):
            yield from map(self.infer, planned)
            return
        futures = [self._lane_pool.submit(self._lane_run, inputs) for inputs in planned]
        try:
            for future in futures:
                yield future.result()
        finally:  # abandoned (a failed batch is bisected batch by batch): start no more of them
            for future in futures:
                future.cancel()

    def _lane_run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self._outputs, self._lane_session.run(self._outputs, inputs), strict=True))

    def time_batch(self, inputs: dict[str, np.ndarray]) -> float:
        if self.providers != ["CPUExecutionProvider"]:
            return super().time_batch(inputs)
        # On the CPU a window's batches run in the lanes, one core each, so a batch costs what it
        # costs one lane. A one-thread session computes on the calling thread, so that thread's
        # CPU time is the batch's compute, which the preprocess worker and the broker starting on
        # the same cores cannot inflate as they inflated wall-clock probes: those fitted 0-27
        # tokens' worth of a call from run to run, and the batch sizes with them.
        session = self._lane_session if self.lanes > 1 else self._session
        start = time.thread_time()
        session.run(self._outputs, inputs)
        return time.thread_time() - start


def balanced(batches: list[dict[str, np.ndarray]], lanes: int) -> bool:
    """Whether `lanes` one-core runs can share these batches evenly: none is more than its share
    of the work (elements of its largest input). A window of one big batch and a few small ones
    runs one batch after another on every core instead, or the big one would get one core."""
    sizes = [max(a.size for a in inputs.values()) for inputs in batches]
    return len(sizes) >= 2 and max(sizes) * lanes <= sum(sizes)
