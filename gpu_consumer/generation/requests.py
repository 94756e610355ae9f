"""One generation request and its completion, as the GPU stage holds them (frozen records)."""

from __future__ import annotations

from dataclasses import dataclass

# A request names at most this many stop strings (OpenAI's limit)
MAX_STOP_STRINGS = 4


@dataclass(frozen=True)
class SamplingParams:
    """How one request decodes. temperature 0 is greedy: the same tokens whatever runs beside it."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k cut
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class GenerationRequest:
    """A prompt's token ids and how to decode them; `key` names it to the engine (unique while in flight)."""

    key: str
    prompt: tuple[int, ...]
    params: SamplingParams


@dataclass(frozen=True)
class Completion:
    """A finished sequence: its tokens (an end-of-sequence id included, as it was generated), its text
    (the stop string and what followed cut, special tokens left out) and why it ended: "stop" (an
    end-of-sequence id or a stop string) or "length" (max_tokens). `error`: the engine failed it;
    `refused`: the engine refused the request itself (its own fault, whatever runs beside it), where
    an error without it may be the engine's, failing a whole batch (GenerationStep runs it alone)."""

    key: str
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str
    prompt_tokens: int
    cached_prompt_tokens: int = 0
    error: str | None = None
    refused: bool = False
