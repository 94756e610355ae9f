"""Generation requests to prompt token ids (pure but for the tokenizer it loads): the chat
template rendered, or the prompt tokenized, as transformers does for `generate()`, so the GPU
stage's completions are token-identical to running the model directly."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from model_repository.config import ModelConfig, ModelUnavailableError
from schemas.generation_request import (
    REQUEST_ATTRIBUTE,
    SAMPLING_ATTRIBUTE,
    RequestError,
    parse_request,
    prompt_request,
)


class PromptRenderer:
    """A causal LM's tokenizer with its chat template (transformers' AutoTokenizer on the model's folder)."""

    def __init__(self, config: ModelConfig) -> None:
        assert config.generation is not None
        self.config = config
        self._context = config.generation.context_length
        self._default_max_tokens = config.generation.default_max_tokens
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a missing file is an error, never a download
        try:
            from transformers import AutoTokenizer

            self._tokenizer: Any = AutoTokenizer.from_pretrained(str(config.generator_path))
        except Exception as exc:  # ImportError, OSError, ValueError: the model folder cannot serve
            raise ModelUnavailableError(
                f"model unavailable: {config.name} version {config.version}: its tokenizer in "
                f"{config.generator_path} cannot be loaded: {exc}"
            ) from None

    def render(self, text: str, attributes: Mapping[str, str]) -> tuple[np.ndarray, str]:
        """(prompt token ids, the sampling attribute's JSON) of one record, or RequestError: a
        request (REQUEST_ATTRIBUTE) as it asks, any other text as a prompt with the defaults."""
        request = parse_request(text) if REQUEST_ATTRIBUTE in attributes else prompt_request(text)
        if request.messages:
            if not self.config.generation or not self.config.generation.chat_template:
                raise RequestError(f"model {self.config.name} has no chat template: send a prompt instead of messages")
            rendered = self._tokenizer.apply_chat_template(request.chat(), add_generation_prompt=True, tokenize=False)
            ids = self._tokenizer(rendered, add_special_tokens=False)["input_ids"]
        else:
            ids = self._tokenizer(request.prompt)["input_ids"]
        max_tokens = int(request.params.get("max_tokens", self._default_max_tokens))
        if len(ids) + max_tokens > self._context:
            raise RequestError(
                f"the prompt's {len(ids)} tokens and max_tokens {max_tokens} exceed the model's context of "
                f"{self._context} tokens"
            )
        params = {**request.params, "max_tokens": max_tokens}
        return np.asarray(ids, dtype=np.int64), json.dumps(params, separators=(",", ":"))


def with_sampling(attributes: Mapping[str, str], sampling: str) -> dict[str, str]:
    """The record's attributes for the GPU stage: its sampling parameters in, the request mark out."""
    kept = {k: v for k, v in attributes.items() if k != REQUEST_ATTRIBUTE}
    return {**kept, SAMPLING_ATTRIBUTE: sampling}


def request_for_encoder(attributes: Sequence[Mapping[str, str]]) -> int | None:
    """The index of the first record that is a generation request, which a model that does not
    generate cannot run (each such record is dead-lettered), else None."""
    return next((i for i, a in enumerate(attributes) if a and REQUEST_ATTRIBUTE in a), None)
