"""A generation engine that costs nothing: the real GPU worker loop, topics and serde around it,
so what a benchmark measures of the worker is the platform's own CPU per generated token.

Each request completes at once with max_tokens tokens (the prompt's last id repeated, decoded by
the model's own tokenizer, as a real completion's text is on the emit thread)."""

from __future__ import annotations

import queue
from collections.abc import Sequence

from tokenizers import Tokenizer

from gpu_consumer.generation.requests import Completion, GenerationRequest
from model_repository.config import ModelConfig


class ZeroCostGenerator:
    name = "zero-cost"
    busy_s = 0.0  # it computes nothing
    kv_tokens = 2**31  # and holds no cache

    def __init__(self, config: ModelConfig, max_sequences: int = 64) -> None:
        self.max_sequences = max_sequences
        self._tokenizer = Tokenizer.from_file(str(config.tokenizer_path))
        self._done: queue.Queue[GenerationRequest] = queue.Queue()

    def warmup(self) -> None:
        pass

    def submit(self, request: GenerationRequest) -> None:
        self._done.put(request)

    def cancel(self, key: str) -> None:
        pass

    def completions(self, timeout_s: float) -> list[Completion]:
        out = []
        try:
            request = self._done.get(timeout=timeout_s)
            while True:
                out.append(self._complete(request))
                request = self._done.get_nowait()
        except queue.Empty:
            return out

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(tokens), skip_special_tokens=True))

    def close(self) -> None:
        pass

    def _complete(self, request: GenerationRequest) -> Completion:
        tokens = (request.prompt[-1],) * request.params.max_tokens
        return Completion(request.key, tokens, self.decode(tokens), "length", len(request.prompt))
