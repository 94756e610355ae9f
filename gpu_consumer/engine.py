"""The engine seam: the one narrow protocol every backend implements, and the ONNX Runtime backend."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from gpu_consumer import ENGINES
from gpu_consumer.batcher import edge_batches, pad_batch, warmup_batch
from gpu_consumer.cost_model import CostModel, measure
from kafka_io.cpus import usable_cpus
from schemas.model_config import ModelConfig

log = logging.getLogger(__name__)


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
        # preprocess worker need: 0.6 CPU-s of a 2,000-text run on two cores, against 0.36 s
        # without, and the engine alone as fast either way (bench/HISTORY.md, "Session of 2026-12-02, night").
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


def make_engine(
    config: ModelConfig,
    kind: str = "auto",
    threads: int = 0,
    max_batch_size: int | None = None,
    max_batch_tokens: int | None = None,
) -> Engine:
    """auto: TensorRT if it imports and a GPU is visible, else torch on CUDA, else ONNX Runtime (CPU
    here; it uses the CUDA/TensorRT execution providers itself where its build has them).
    max_batch_size, max_batch_tokens: the worker's limits, where the torch engine sizes its buffers
    and graphs by them."""
    if kind == "tensorrt" or (kind == "auto" and _tensorrt_usable()):
        from gpu_consumer.tensorrt_engine import TensorRTEngine

        return TensorRTEngine(config)
    torchscript = _has_torchscript(config)
    if kind == "torch" and not torchscript:
        raise EngineLoadError(
            f"{config.name}:{config.version} has no TorchScript (model.pt) for the torch engine: a model imported "
            "as a ready model.onnx runs on --engine onnxruntime or tensorrt; to run it on torch, import the "
            "transformers folder it was exported from"
        )
    if kind == "torch" or (kind == "auto" and torchscript and _cuda_torch_usable()):
        from gpu_consumer.torch_engine import TorchEngine

        return TorchEngine(config, max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens)
    if kind in ("auto", "onnxruntime"):
        return OnnxRuntimeEngine(config, threads)
    raise EngineLoadError(f"unknown engine {kind!r}; available: {', '.join(ENGINES)}")


def resolved_kind(config: ModelConfig, kind: str = "auto") -> str:
    """The engine make_engine(config, kind) makes, without making it: "cuda-torch" for the torch
    engine on a visible GPU, else the kind's name."""
    if kind == "tensorrt" or (kind == "auto" and _tensorrt_usable()):
        return "tensorrt"
    if kind == "torch" or (kind == "auto" and _has_torchscript(config) and _cuda_torch_usable()):
        return "cuda-torch" if _cuda_torch_usable() else "torch"
    return kind if kind != "auto" else "onnxruntime"


# On a GPU the call, not the row, is what an executed batch of short texts costs: the torch engine
# there takes up to CUDA_BATCH_ROWS rows while their padded tokens stay within CUDA_BATCH_TOKENS
# (a batch of 64 rows of 256 tokens, the old bound at full length, is the same budget). Chosen
# before the engine's rate against batch size was measured on a device: `bench.engine_curve` in
# bench/gpu_check.sh measures it; see docs/benchmarks.md.
CUDA_BATCH_ROWS = 512
CUDA_BATCH_TOKENS = 16384


def batch_limits(
    config: ModelConfig, kind: str, max_batch_size: int | None, max_batch_tokens: int | None
) -> tuple[int, int | None]:
    """The executed batch's bounds (rows, padded tokens): the ones asked for, else the model's rows
    and no token budget, except for the torch engine on CUDA with neither asked for, whose
    defaults let the token budget bound short texts' batches (CUDA_BATCH_ROWS, CUDA_BATCH_TOKENS)."""
    if max_batch_size is None and max_batch_tokens is None and kind == "cuda-torch" and config.tokenizer is not None:
        return CUDA_BATCH_ROWS, CUDA_BATCH_TOKENS
    return max_batch_size or config.max_batch_size, max_batch_tokens


def infer_all(engine: Engine, batches: list[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
    """Outputs per batch; engines that can overlap the next batch's copy-in with compute do."""
    return iter(engine.infer_many(batches))


def measure_cost(engine: Engine, config: ModelConfig) -> CostModel | None:
    """The engine's batch costs, timed on synthetic batches now (after warm-up); None where the
    planner has no use for them: images, and engines that pad to a length bucket anyway."""
    if config.tokenizer is None or engine.pad_to_bucket:
        return None
    token = config.tokenizer.pad_id + 1

    def timed(rows: int, width: int) -> float:
        return engine.time_batch(pad_batch(config, [np.full(width, token, dtype=np.int64)] * rows).inputs)

    model = measure(timed, engine.probe_rounds)
    log.info("%s batch cost: %s", engine.name, model)
    return model


def _has_torchscript(config: ModelConfig) -> bool:
    """Whether the torch engine has a module to load: an imported model.onnx has none (onnx_import.py)."""
    return any((config.directory / f).is_file() for f in ("model.pt", "model.fp16.pt"))


def _tensorrt_usable() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorrt") is not None and _cuda_torch_usable()


def _cuda_torch_usable() -> bool:
    import importlib.util
    from pathlib import Path

    # no NVIDIA driver node: skip importing torch (seconds, hundreds of MB) just to hear "no"
    if not Path("/dev/nvidiactl").exists() or importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())
