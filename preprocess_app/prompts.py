"""Generation requests to prompt token ids (pure but for the tokenizer it loads): the chat
template rendered, or the prompt tokenized, as transformers does for `generate()`, so the GPU
stage's completions are token-identical to running the model directly."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from schemas.generation_request import SAMPLING_ATTRIBUTE, RequestError, parse_request
from schemas.model_config import ModelConfig, ModelUnavailableError


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

    def render(self, text: str) -> tuple[np.ndarray, str]:
        """(prompt token ids, the sampling attribute's JSON) of one request, or RequestError."""
        request = parse_request(text)
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


def with_sampling(attributes: dict[str, str], sampling: str) -> dict[str, str]:
    return {**attributes, SAMPLING_ATTRIBUTE: sampling}
