"""The generation engine protocol the GPU stage drives, what bounds an engine, and its errors.

Two backends, one behaviour (gpu_consumer/engines/generation_factory.py picks one): vLLM where it is
installed (vllm_engine.py) and transformers' continuous batching (transformers_engine.py). Both
decode on a thread or process of their own, take a new request into the running batch at the next
decode step, share the KV blocks of a prompt prefix another request computed, and hand back token
ids: text and stop strings are this package's (stops.py), decided on the caller's thread, the
post-process stage, so the same tokens give the same text and ending on either engine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gpu_consumer.engines.protocol import EngineLoadError
from gpu_consumer.generation.requests import Completion, GenerationRequest, SamplingParams
from model_repository.config import GenerationSpec, ModelConfig

WARMUP_TIMEOUT_S = 300.0


class GenerationEngine(Protocol):
    name: str
    max_sequences: int  # the most requests the caller keeps submitted and not completed
    busy_s: float  # seconds the engine spent decoding: the engine busy figure
    kv_tokens: int  # what the KV cache holds: a request whose prompt and max_tokens pass it never runs

    def warmup(self) -> None:
        """One short request decoded end to end, so a model that cannot run fails at start-up."""

    def submit(self, request: GenerationRequest) -> None:
        """Queue a request; it joins the running batch at the next decode step."""

    def cancel(self, key: str) -> None:
        """Stop a request at the next decode step; it gives no completion."""

    def completions(self, timeout_s: float) -> list[Completion]:
        """Requests finished since the last call (waiting up to timeout_s for the first)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class GenerationSettings:
    """How much the engine holds at once: sequences decoded together, the KV cache's tokens (its
    blocks: `page_size` tokens each), and the tokens one forward step computes (prompt chunks and
    one token per decoding sequence). `eager`: no graph capture or compilation (vLLM's
    torch.compile and CUDA graphs): it starts in seconds rather than a minute and decodes slower."""

    max_sequences: int = 64
    kv_cache_tokens: int = 16384  # SmolLM2-135M: 46 KB a token in float32, 750 MB
    page_size: int = 64
    step_tokens: int = 1024
    prefix_sharing: bool = True
    eager: bool = False


def kv_blocks(limits: GenerationSettings) -> int:
    """The KV cache's blocks: kv_cache_tokens rounded up to whole pages (at least 2)."""
    return max(2, -(-limits.kv_cache_tokens // limits.page_size))


class GenerationFailedError(RuntimeError):
    """The engine failed a request (its message is the engine's)."""


def generation_of(config: ModelConfig) -> GenerationSpec:
    """The model's generation spec, for an engine about to load it (EngineLoadError if it has none);
    from here on a missing file is an error, never a download."""
    if config.generation is None:
        raise EngineLoadError(f"{config.name}:{config.version} does not generate text (task {config.task})")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return config.generation


def warm_up(engine: GenerationEngine, eos_ids: frozenset[int], stopped: Callable[[], str | None]) -> None:
    """One short request decoded end to end, so a model that cannot run fails at start-up:
    EngineLoadError if it fails, or if `stopped()` names why the engine stopped, or at the timeout."""
    first = next(iter(sorted(set(range(8)) - eos_ids)), 0)  # an id that ends nothing
    engine.submit(GenerationRequest("nearline-warmup", (first,) * 8, SamplingParams(max_tokens=2)))
    deadline = time.monotonic() + WARMUP_TIMEOUT_S
    while time.monotonic() < deadline:
        for done in engine.completions(1.0):
            if done.error is not None:
                raise EngineLoadError(f"the model failed its warm-up request: {done.error}")
            return
        if (why := stopped()) is not None:
            raise EngineLoadError(f"the model did not finish its warm-up request: {why}")
    raise EngineLoadError(f"the model did not finish its warm-up request within {WARMUP_TIMEOUT_S:.0f} s")
