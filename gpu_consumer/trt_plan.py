"""TensorRT planning as pure functions: optimisation profiles, the engine-cache key, buffer sizes.

Everything here is decided from the model config and plain facts about the GPU, so it is tested
on machines without TensorRT; gpu_consumer/engines/tensorrt_engine.py only carries the plan out.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from model_repository.config import ModelConfig

Shape = tuple[int, ...]


@dataclass(frozen=True)
class InputRange:
    name: str
    min: Shape
    opt: Shape
    max: Shape


@dataclass(frozen=True)
class Profile:
    """One optimisation profile: the shape range of every input; text has one per length bucket."""

    inputs: tuple[InputRange, ...]
    width: tuple[int, int] = (0, 0)  # the sequence lengths this profile serves (text)


def derive_profiles(config: ModelConfig, max_batch_size: int) -> list[Profile]:
    """Profiles from the model config: batch 1..max (opt at max: a busy worker runs full batches);
    for text one profile per length bucket, sequence (previous bucket + 1)..bucket, opt at bucket."""
    if config.tokenizer is None:  # fixed per-record shape (images)
        fixed = []
        for spec in config.inputs:
            rest = tuple(int(d) for d in spec.dims[1:])
            fixed.append(InputRange(spec.name, (1, *rest), (max_batch_size, *rest), (max_batch_size, *rest)))
        return [Profile(tuple(fixed))]
    profiles, low = [], 1
    for bucket in config.buckets:
        ranges = tuple(
            InputRange(spec.name, (1, low), (max_batch_size, bucket), (max_batch_size, bucket))
            for spec in config.inputs
        )
        profiles.append(Profile(ranges, (low, bucket)))
        low = bucket + 1
    return profiles


def profile_for(profiles: list[Profile], width: int) -> int:
    """Index of the profile that serves batches padded to `width` (0 for fixed-shape models)."""
    for i, p in enumerate(profiles):
        if p.width == (0, 0) or p.width[0] <= width <= p.width[1]:
            return i
    raise ValueError(f"no optimisation profile serves sequence length {width}")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def engine_cache_key(
    onnx_sha256: str,
    tensorrt_version: str,
    gpu_name: str,
    compute_capability: tuple[int, int],
    precision: str,
    profiles: list[Profile],
) -> str:
    """A serialized engine is only valid for the same graph, TensorRT, GPU, precision and
    profiles; any change gives a new key, so a restart never rebuilds and never loads a stale one."""
    facts = {
        "onnx": onnx_sha256,
        "tensorrt": tensorrt_version,
        "gpu": gpu_name,
        "sm": list(compute_capability),
        "precision": precision,
        "profiles": [asdict(p) for p in profiles],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Buffer:
    name: str
    shape: Shape  # the largest this tensor gets under any profile
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


def plan_buffers(config: ModelConfig, profiles: list[Profile]) -> list[Buffer]:
    """Device and pinned host buffers, allocated once at the largest shapes and sliced per batch."""
    max_batch = max(r.max[0] for p in profiles for r in p.inputs)
    max_width = max((p.width[1] for p in profiles), default=0)
    buffers = []
    for spec in config.inputs:
        shape = max((r.max for p in profiles for r in p.inputs if r.name == spec.name), key=lambda s: int(np.prod(s)))
        buffers.append(Buffer(spec.name, shape, spec.dtype))
    for spec in config.outputs:
        dims = {"batch": max_batch, "sequence": max_width}
        shape = tuple(dims[d] if isinstance(d, str) else int(d) for d in spec.dims)
        buffers.append(Buffer(spec.name, shape, spec.dtype))
    return buffers
