"""Which generation engine a worker runs: vLLM where it is installed, else transformers' continuous
batching (each imported only when picked, as gpu_consumer/engines/factory.py does for the encoders)."""

from __future__ import annotations

import importlib.util

from gpu_consumer import ENCODER_ENGINES, GENERATION_ENGINES
from gpu_consumer.engines.generation_protocol import GenerationEngine, GenerationSettings
from gpu_consumer.engines.protocol import EngineLoadError
from model_repository.config import ModelConfig


def generator_kind(kind: str = "auto") -> str:
    """The engine make_generator(config, kind) makes: auto is vllm where the package imports."""
    if kind in ENCODER_ENGINES:
        generators = ", ".join(GENERATION_ENGINES)
        raise EngineLoadError(f"--engine {kind} runs encoders; a causal LM runs on auto, {generators}")
    if kind == "auto":
        return "vllm" if importlib.util.find_spec("vllm") is not None else "transformers"
    if kind not in GENERATION_ENGINES:
        raise EngineLoadError(f"unknown engine {kind!r}; a causal LM runs on auto, {', '.join(GENERATION_ENGINES)}")
    return kind


def make_generator(
    config: ModelConfig, kind: str = "auto", limits: GenerationSettings | None = None, driven: bool = False
) -> GenerationEngine:
    """`driven`: an engine that can be stepped by the caller's thread (a DrivenEngine) starts no
    thread of its own for it; the caller drives it (main_thread.py)."""
    if generator_kind(kind) == "vllm":
        from gpu_consumer.engines.vllm_engine import VllmEngine

        return VllmEngine(config, limits, driven=driven)
    from gpu_consumer.engines.transformers_engine import TransformersEngine

    return TransformersEngine(config, limits)
