"""The TensorRT backend: engines built from the model's ONNX with one optimisation profile per
length bucket, FP16 where the GPU has fast FP16, a timing cache, and an engine cache keyed by
everything that makes a serialized engine valid (trt_plan.engine_cache_key).

UNVERIFIED: TensorRT cannot be installed anywhere this project is built or tested (its PyPI
packages download from NVIDIA's own index). The code follows the TensorRT 10 Python API; the
planning it relies on (profiles, cache key, buffers) is tested on CPU in tests/gpu_consumer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gpu_consumer.batcher import warmup_batch
from gpu_consumer.cuda_staging import Slot, pipelined, torch_dtype
from gpu_consumer.device_postprocess import apply, device_steps
from gpu_consumer.engines.protocol import Engine, EngineLoadError
from gpu_consumer.trt_plan import derive_profiles, engine_cache_key, plan_buffers, profile_for, sha256_of
from model_repository.config import ModelConfig

log = logging.getLogger(__name__)
INSTALL_HINT = (
    "the tensorrt engine needs NVIDIA TensorRT 10 for Python and a CUDA GPU: install the 'tensorrt' "
    "package from NVIDIA's package index (or use an NGC TensorRT container); "
    "or run with --engine torch (CUDA) or --engine onnxruntime"
)


def import_tensorrt() -> Any:
    """The one import of tensorrt, failing with what to install instead of a bare ImportError."""
    try:
        import tensorrt
    except ImportError:
        raise EngineLoadError(INSTALL_HINT) from None
    return tensorrt


def default_cache_dir() -> Path:
    return Path(os.environ.get("NEARLINE_ENGINE_CACHE", Path.home() / ".cache" / "nearline" / "tensorrt"))


class TensorRTEngine(Engine):
    name = "tensorrt"
    postprocessed: tuple[str, ...] = ()
    pad_to_bucket = True  # one profile per bucket: padding to the bucket keeps shapes at the profile opt

    def __init__(self, config: ModelConfig, cache_dir: Path | None = None, fp16: bool = True) -> None:
        if not config.onnx_path.is_file():  # before TensorRT: a broken model folder is said as such anywhere
            raise EngineLoadError(
                f"{config.onnx_path} is missing: TensorRT builds its engine from the model's ONNX file "
                f"(nearline models prepare {config.name}, or import the model again)"
            )
        trt = import_tensorrt()
        import torch

        if not torch.cuda.is_available():
            raise EngineLoadError("the tensorrt engine needs a CUDA GPU; none is visible")
        self.config = config
        self.max_batch_size = config.max_batch_size
        self.trt = trt
        self.device = torch.device("cuda")
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.profiles = derive_profiles(config, self.max_batch_size)
        props = torch.cuda.get_device_properties(self.device)
        builder = trt.Builder(self.logger)
        self.precision = "fp16" if fp16 and builder.platform_has_fast_fp16 else "fp32"
        key = engine_cache_key(
            sha256_of(config.onnx_path),
            trt.__version__,
            props.name,
            (props.major, props.minor),
            self.precision,
            self.profiles,
        )
        cache = cache_dir or default_cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        plan_path = cache / f"{config.name}-{config.version}-{key}.engine"
        if plan_path.is_file():
            serialized = plan_path.read_bytes()
            log.info("tensorrt: loaded cached engine %s", plan_path)
        else:
            serialized = self._build(builder, cache / "timing.cache")
            tmp = plan_path.with_suffix(".tmp")
            tmp.write_bytes(serialized)
            tmp.rename(plan_path)  # atomic: a concurrent worker never reads half an engine
        self.engine = trt.Runtime(self.logger).deserialize_cuda_engine(serialized)
        if self.engine is None:
            raise EngineLoadError(f"TensorRT could not deserialize {plan_path}")
        self.context = self.engine.create_execution_context()
        buffers = plan_buffers(config, self.profiles)
        names_in = {s.name for s in config.inputs}
        self.inputs = [b for b in buffers if b.name in names_in]
        self.outputs = [b for b in buffers if b.name not in names_in]
        self.dev_out = {
            b.name: torch.empty(b.shape, dtype=torch_dtype(b.dtype), device=self.device) for b in self.outputs
        }
        self.slots = [Slot(self.inputs, self.outputs, self.device) for _ in range(2)]
        self.copy_stream = torch.cuda.Stream()
        self.compute_stream = torch.cuda.Stream()
        self.active_profile = -1
        self.postprocessed = device_steps(config)

    def _build(self, builder: Any, timing_path: Path) -> bytes:
        trt = self.trt
        network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse(self.config.onnx_path.read_bytes()):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise EngineLoadError(f"TensorRT cannot parse {self.config.onnx_path}: {errors}")
        build = builder.create_builder_config()
        if self.precision == "fp16":
            build.set_flag(trt.BuilderFlag.FP16)
        timing = build.create_timing_cache(timing_path.read_bytes() if timing_path.is_file() else b"")
        build.set_timing_cache(timing, ignore_mismatch=False)
        for p in self.profiles:
            profile = builder.create_optimization_profile()
            for r in p.inputs:
                profile.set_shape(r.name, r.min, r.opt, r.max)
            build.add_optimization_profile(profile)
        serialized = builder.build_serialized_network(network, build)
        if serialized is None:
            raise EngineLoadError(f"TensorRT failed to build an engine for {self.config.onnx_path}")
        timing_path.write_bytes(memoryview(build.get_timing_cache().serialize()))
        return bytes(serialized)

    def warmup(self) -> None:
        self.infer(warmup_batch(self.config).inputs)

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return next(self.infer_many([inputs]))

    def infer_many(self, batches: Iterable[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
        return pipelined(batches, self.slots, self.copy_stream, self.compute_stream, self._enqueue)

    def _enqueue(self, views: dict[str, Any]) -> dict[str, Any]:
        import torch

        first = next(iter(views.values()))
        width = int(first.shape[1]) if self.config.tokenizer is not None else 0
        index = profile_for(self.profiles, width)
        stream = self.compute_stream.cuda_stream
        if index != self.active_profile:
            self.context.set_optimization_profile_async(index, stream)
            self.active_profile = index
        for name, tensor in views.items():
            self.context.set_input_shape(name, tuple(tensor.shape))
            self.context.set_tensor_address(name, tensor.data_ptr())
        outputs = {}
        for b in self.outputs:
            shape = tuple(self.context.get_tensor_shape(b.name))
            view = self.dev_out[b.name].view(-1)[: int(np.prod(shape))].view(shape)
            self.context.set_tensor_address(b.name, view.data_ptr())
            outputs[b.name] = view
        if not self.context.execute_async_v3(stream):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        with torch.cuda.stream(self.compute_stream):  # pooled on the device, after the graph
            return apply(self.config, self.postprocessed, outputs, views)
