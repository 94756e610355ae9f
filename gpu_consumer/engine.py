"""The engine seam: the one narrow protocol every backend implements, and the ONNX Runtime backend."""

from __future__ import annotations

import logging
from typing import Protocol

import numpy as np

from gpu_consumer.batcher import warmup_batch
from schemas.model_config import ModelConfig

log = logging.getLogger(__name__)


class Engine(Protocol):
    name: str
    max_batch_size: int
    # True for static-shape engines (TensorRT profiles, CUDA graphs): text batches are padded to
    # the model's length bucket instead of the longest record, so each shape is built once.
    pad_to_bucket: bool

    def warmup(self) -> None:
        """Run once at the largest shape, so a bad engine fails at start-up, not mid-poll."""

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Batched graph inputs in, graph outputs by name out."""
        ...


class EngineLoadError(RuntimeError):
    """The engine cannot start: the worker exits and the records stay in Kafka."""


# Tried in this order; ONNX Runtime silently skips providers whose libraries are absent, so the
# list is filtered by what this build reports as available.
PREFERRED_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


class OnnxRuntimeEngine:
    name = "onnxruntime"
    pad_to_bucket = False  # dynamic axes: the longest record of the batch is the cheapest width

    def __init__(self, config: ModelConfig, threads: int = 0) -> None:
        import onnxruntime as ort

        self.config = config
        self.max_batch_size = config.max_batch_size
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads  # 0: one per core
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        available = set(ort.get_available_providers())
        self.providers = [p for p in PREFERRED_PROVIDERS if p in available]
        try:
            self._session = ort.InferenceSession(str(config.onnx_path), options, providers=self.providers)
        except Exception as exc:  # ORT raises its own exception types for a missing or broken file
            raise EngineLoadError(f"cannot load {config.onnx_path}: {exc}") from exc
        self._outputs = [o.name for o in self._session.get_outputs()]
        log.info("onnxruntime engine for %s:%s on %s", config.name, config.version, self.providers)

    def warmup(self) -> None:
        self.infer(warmup_batch(self.config).inputs)

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self._outputs, self._session.run(self._outputs, inputs), strict=True))


def make_engine(config: ModelConfig, kind: str = "auto", threads: int = 0) -> Engine:
    if kind in ("auto", "onnxruntime"):
        return OnnxRuntimeEngine(config, threads)
    raise EngineLoadError(f"unknown engine {kind!r}; available: auto, onnxruntime")
