"""Host-to-GPU staging shared by the GPU engines: pinned host buffers, device buffers, a copy stream.

Two slots alternate, so the copy-in of batch N+1 runs on the copy stream while batch N computes
on the compute stream (see pipelined() below). Buffers are allocated once at the largest shape
and sliced per batch. Needs torch with CUDA; imported only by the engines that run on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from gpu_consumer.trt_plan import Buffer

TORCH_DTYPES = {
    "int64": "int64",
    "int32": "int32",
    "uint8": "uint8",
    "float32": "float32",
    "float16": "float16",
    "bool": "bool",
}


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, TORCH_DTYPES[name])


class Slot:
    """One set of pinned host and device buffers for inputs and outputs."""

    def __init__(self, inputs: list[Buffer], outputs: list[Buffer], device: Any) -> None:
        import torch

        def alloc(b: Buffer, **kw: Any) -> Any:
            return torch.empty(b.shape, dtype=torch_dtype(b.dtype), **kw)

        self.host_in = {b.name: alloc(b, pin_memory=True) for b in inputs}
        self.dev_in = {b.name: alloc(b, device=device) for b in inputs}
        self.host_out = {b.name: alloc(b, pin_memory=True) for b in outputs}
        self.copied = torch.cuda.Event()
        self.done = torch.cuda.Event()
        self.done.record()  # free at start

    def stage(self, inputs: dict[str, np.ndarray], copy_stream: Any) -> dict[str, Any]:
        """Copy the batch into this slot's device buffers on the copy stream; returns device views."""
        import torch

        self.done.synchronize()  # the host buffers may still feed the previous copy or hold outputs
        views = {}
        with torch.cuda.stream(copy_stream):
            for name, array in inputs.items():
                host = _view(self.host_in[name], array.shape)
                host.copy_(torch.from_numpy(np.ascontiguousarray(array)))
                device = _view(self.dev_in[name], array.shape)
                device.copy_(host, non_blocking=True)
                views[name] = device
            self.copied.record(copy_stream)
        return views

    def fetch(self, outputs: dict[str, Any], stream: Any) -> dict[str, Any]:
        """Queue the device outputs' copy into pinned host memory on `stream`."""
        import torch

        hosts = {}
        with torch.cuda.stream(stream):
            for name, tensor in outputs.items():
                host = _view(self.host_out[name], tuple(tensor.shape))
                host.copy_(tensor, non_blocking=True)
                hosts[name] = host
            self.done.record(stream)
        return hosts


def _view(buffer: Any, shape: tuple[int, ...]) -> Any:
    return buffer.view(-1)[: int(np.prod(shape))].view(shape)


def pipelined(
    batches: Iterable[dict[str, np.ndarray]],
    slots: list[Slot],
    copy_stream: Any,
    compute_stream: Any,
    compute: Callable[[dict[str, Any]], dict[str, Any]],
) -> Iterator[dict[str, np.ndarray]]:
    """Outputs per batch, in order. Batch N+1's copy-in is queued before batch N's outputs are
    awaited, so transfers overlap compute; `compute` only enqueues work on the compute stream."""
    pending: tuple[Slot, dict[str, Any]] | None = None
    for n, inputs in enumerate(batches):
        slot = slots[n % len(slots)]
        views = slot.stage(inputs, copy_stream)
        compute_stream.wait_event(slot.copied)
        hosts = slot.fetch(compute(views), compute_stream)
        if pending is not None:
            yield _collect(*pending)
        pending = (slot, hosts)
    if pending is not None:
        yield _collect(*pending)


def _collect(slot: Slot, hosts: dict[str, Any]) -> dict[str, np.ndarray]:
    slot.done.synchronize()
    return {name: host.numpy().copy() for name, host in hosts.items()}
