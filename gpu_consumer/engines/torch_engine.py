"""The torch backend: the model's TorchScript on CUDA in FP16 (models/<name>/<version>/model.fp16.pt),
with static shapes per (batch, length) bucket replayed as CUDA graphs and pinned-memory copies on
a side stream (cuda_staging). On a machine without CUDA it runs the FP32 module (model.pt) on the
CPU, which is how its parity with ONNX Runtime is tested here; either precision runs on either
device when asked for, or when it is the only file there (the GPU carry ships FP16 only).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gpu_consumer.batcher import shaped_batch, warmup_batch
from gpu_consumer.device_postprocess import apply, device_steps
from gpu_consumer.engines.protocol import Engine, EngineLoadError
from gpu_consumer.trt_plan import derive_profiles, plan_buffers
from model_repository.config import TORCHSCRIPT_FILE, TORCHSCRIPT_FP16_FILE, ModelConfig

log = logging.getLogger(__name__)
PRECISION_FILES = {"fp32": TORCHSCRIPT_FILE, "fp16": TORCHSCRIPT_FP16_FILE}


def torchscript_path(directory: Path, preferred: str) -> tuple[Path, str]:
    """The TorchScript file to load and its precision: the preferred one, else the other one there is."""
    if preferred not in PRECISION_FILES:
        raise EngineLoadError(f"unknown precision {preferred!r}; available: {', '.join(PRECISION_FILES)}")
    for precision in (preferred, *(p for p in PRECISION_FILES if p != preferred)):
        if (directory / PRECISION_FILES[precision]).is_file():
            return directory / PRECISION_FILES[precision], precision
    raise EngineLoadError(
        f"{directory} has no {' or '.join(PRECISION_FILES.values())}: prepare the model again "
        f"(nearline models prepare {directory.parent.name})"
    )


def batch_bucket(rows: int, max_batch_size: int) -> int:
    """Rows padded up to a power of two (at most max_batch_size): few shapes, so few CUDA graphs."""
    bucket = 1
    while bucket < rows:
        bucket *= 2
    return min(bucket, max_batch_size)


def graph_shapes(
    config: ModelConfig, max_batch_size: int, max_batch_tokens: int | None = None
) -> list[tuple[int, int]]:
    """Every (rows, length) a batch is padded to on CUDA, largest first: one CUDA graph each. Image
    models have one shape per row count (length 0), text models one per length bucket too. Under a
    token budget a length bucket takes only the rows the planner forms there (at most
    max_batch_tokens // length, at least one), padded up to their power of two."""
    lengths = sorted(config.buckets, reverse=True) or [0]
    shapes = []
    for length in lengths:
        most = max_batch_size
        if max_batch_tokens is not None and length:
            most = max(1, min(max_batch_size, max_batch_tokens // length))
        rows = sorted({batch_bucket(n, max_batch_size) for n in range(1, most + 1)}, reverse=True)
        shapes += [(r, length) for r in rows]
    return shapes


def pad_rows(inputs: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """Add rows up to `rows`; an added text row holds one real token so no attention row is empty."""
    out = {}
    for name, array in inputs.items():
        extra = rows - array.shape[0]
        if extra <= 0:
            out[name] = array
            continue
        filler = np.zeros((extra, *array.shape[1:]), dtype=array.dtype)
        if name == "attention_mask":
            filler[:, 0] = 1
        out[name] = np.concatenate([array, filler])
    return out


class TorchEngine(Engine):
    name = "torch"

    def __init__(
        self,
        config: ModelConfig,
        device: str | None = None,
        cuda_graphs: bool = True,
        precision: str | None = None,
        postprocess_on_device: bool = True,
        max_batch_size: int | None = None,
        max_batch_tokens: int | None = None,
    ) -> None:
        """max_batch_size: the worker's own limit: no buffer or CUDA graph is made for batches it
        never forms. It may pass the model's max_batch_size (which sizes ONNX and TensorRT
        profiles) when max_batch_tokens bounds a batch's padded tokens instead: TorchScript takes
        any batch, and a CUDA graph is captured only for the shapes the budget allows."""
        try:
            import torch
        except ImportError:
            raise EngineLoadError("the torch engine needs torch: pip install 'nearline[gpu]'") from None
        self.config = config
        self.max_batch_tokens = max_batch_tokens
        wanted = max_batch_size or config.max_batch_size
        self.max_batch_size = wanted if max_batch_tokens is not None else min(wanted, config.max_batch_size)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.cuda = self.device.type == "cuda"
        path, self.precision = torchscript_path(config.directory, precision or ("fp16" if self.cuda else "fp32"))
        self.postprocessed = device_steps(config) if postprocess_on_device else ()
        self.pad_to_bucket = self.cuda  # static shapes only pay where they are replayed as graphs
        with warnings.catch_warnings():
            # TorchScript is deprecated in favour of torch.export from torch 2.13 on, but it is what
            # loads the same file on the GPU machines' torch 2.11 as on 2.13 here.
            warnings.simplefilter("ignore", DeprecationWarning)
            self.module = torch.jit.load(str(path), map_location=self.device).eval()
        self.output_names = [o.name for o in config.outputs]
        self.cuda_graphs = cuda_graphs and self.cuda
        self._graphs: dict[tuple[tuple[int, ...], ...], tuple[Any, dict[str, Any], dict[str, Any]]] = {}
        if self.cuda:
            from gpu_consumer.cuda_staging import Slot

            buffers = plan_buffers(config, derive_profiles(config, self.max_batch_size))
            names_in = {s.name for s in config.inputs}
            inputs = [b for b in buffers if b.name in names_in]
            outputs = [b for b in buffers if b.name not in names_in]
            self.slots = [Slot(inputs, outputs, self.device) for _ in range(2)]
            self.copy_stream = torch.cuda.Stream()
            self.compute_stream = torch.cuda.Stream()
        log.info("torch engine for %s:%s on %s in %s", config.name, config.version, self.device, self.precision)

    def warmup(self) -> None:
        """Capture a CUDA graph for every shape a batch can take, before the worker consumes: a
        shape first met mid-job costs two eager passes and a capture (tens of ms) while the device
        idles, and a short job meets most of them (`bench.graph_warmup` measures both ways)."""
        if not self.cuda_graphs:
            self.infer(warmup_batch(self.config).inputs)
            return
        import torch

        started = time.perf_counter()
        shapes = graph_shapes(self.config, self.max_batch_size, self.max_batch_tokens)
        for done, (rows, length) in enumerate(shapes):
            try:
                self.infer(shaped_batch(self.config, rows, length).inputs)
            except (torch.cuda.OutOfMemoryError, RuntimeError) as exc:
                # TorchScript raises a CUDA out-of-memory inside the module as a plain RuntimeError
                if not isinstance(exc, torch.cuda.OutOfMemoryError) and "out of memory" not in str(exc).lower():
                    raise
                shape = f"{rows} rows" + (f" of {length} tokens" if length else "")
                raise EngineLoadError(
                    f"model {self.config.name}: out of GPU memory capturing the CUDA graph for {shape} "
                    f"({done} of {len(shapes)} shapes captured): run the worker with a lower --max-batch-size, "
                    f"lower max_batch_size or length_buckets in {self.config.directory / 'config.json'}, "
                    f"or free the device ({str(exc).strip().splitlines()[-1]})"
                ) from None
        log.info("captured %d CUDA graphs in %.1f s", len(shapes), time.perf_counter() - started)

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return next(self.infer_many([inputs]))

    def infer_many(self, batches: Iterable[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
        import torch

        if not self.cuda:
            with torch.inference_mode():
                for inputs in batches:
                    args = {s.name: torch.from_numpy(inputs[s.name]) for s in self.config.inputs}
                    outs = self._forward(args)
                    n = len(next(iter(inputs.values())))
                    yield {name: t[:n].float().numpy() for name, t in outs.items()}
            return

        from gpu_consumer.cuda_staging import pipelined

        rows: list[int] = []

        def padded() -> Iterator[dict[str, np.ndarray]]:
            for inputs in batches:
                n = len(next(iter(inputs.values())))
                rows.append(n)
                yield pad_rows(inputs, batch_bucket(n, self.max_batch_size))

        for k, outputs in enumerate(pipelined(padded(), self.slots, self.copy_stream, self.compute_stream, self._run)):
            yield {name: out[: rows[k]].astype(np.float32, copy=False) for name, out in outputs.items()}

    def _run(self, views: dict[str, Any]) -> dict[str, Any]:
        import torch

        args = [views[s.name] for s in self.config.inputs]
        with torch.cuda.stream(self.compute_stream), torch.inference_mode():
            if not self.cuda_graphs:
                return self._forward(views)
            key = tuple(tuple(a.shape) for a in args)
            if key not in self._graphs:
                self._graphs[key] = self._capture(args)
            graph, static_in, static_out = self._graphs[key]
            for spec, arg in zip(self.config.inputs, args, strict=True):
                static_in[spec.name].copy_(arg)
            graph.replay()
            return static_out

    def _capture(self, args: list[Any]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        import torch

        static_in = {s.name: a.clone() for s, a in zip(self.config.inputs, args, strict=True)}
        for _ in range(2):  # warm the allocator and kernels before capture, as CUDA graphs require
            self._forward(static_in)
        self.compute_stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.compute_stream):
            static_out = self._forward(static_in)  # pooling included: it replays with the model
        return graph, static_in, static_out

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The module's named outputs, through the postprocess steps this engine runs itself."""
        outs = self.module(*[inputs[s.name] for s in self.config.inputs])
        outs = outs if isinstance(outs, tuple | list) else (outs,)
        return apply(self.config, self.postprocessed, dict(zip(self.output_names, outs, strict=True)), inputs)
