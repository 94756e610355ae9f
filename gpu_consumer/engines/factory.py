"""Which engine a worker runs: the factory over the backends (each imported only when picked,
so a CPU host never imports torch), the executed batch's bounds for it, and what its batches cost."""

from __future__ import annotations

import logging

import numpy as np

from gpu_consumer import ENCODER_ENGINES, GENERATION_ENGINES
from gpu_consumer.batcher import pad_batch
from gpu_consumer.cost_model import CostModel, measure
from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
from gpu_consumer.engines.protocol import Engine, EngineLoadError
from model_repository.config import TORCHSCRIPT_FILE, TORCHSCRIPT_FP16_FILE, ModelConfig

log = logging.getLogger(__name__)


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
    if kind in GENERATION_ENGINES:
        encoders = ", ".join(ENCODER_ENGINES)
        raise EngineLoadError(f"--engine {kind} runs causal LMs; {config.name} runs on auto, {encoders}")
    if kind == "tensorrt" or (kind == "auto" and _tensorrt_usable()):
        from gpu_consumer.engines.tensorrt_engine import TensorRTEngine

        return TensorRTEngine(config)
    torchscript = _has_torchscript(config)
    if kind == "torch" and not torchscript:
        raise EngineLoadError(
            f"{config.name}:{config.version} has no TorchScript (model.pt) for the torch engine: a model imported "
            "as a ready model.onnx runs on --engine onnxruntime or tensorrt; to run it on torch, import the "
            "transformers folder it was exported from"
        )
    if kind == "torch" or (kind == "auto" and torchscript and _cuda_torch_usable()):
        from gpu_consumer.engines.torch_engine import TorchEngine

        return TorchEngine(config, max_batch_size=max_batch_size, max_batch_tokens=max_batch_tokens)
    if kind in ("auto", "onnxruntime"):
        return OnnxRuntimeEngine(config, threads)
    raise EngineLoadError(f"unknown engine {kind!r}; available: auto, {', '.join(ENCODER_ENGINES)}")


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
    return any((config.directory / f).is_file() for f in (TORCHSCRIPT_FILE, TORCHSCRIPT_FP16_FILE))


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
