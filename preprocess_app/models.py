"""The models this worker preprocesses for, loaded from the model repository on first use."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from schemas.model_config import ModelConfig, load_model_config


def load_tokenizer(path: Path, max_length: int) -> Tokenizer:
    """The model's tokenizer, truncating to max_length and never padding: padding is the batcher's job."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()  # the packaged MiniLM tokenizer.json pads everything to 128
    tokenizer.enable_truncation(max_length)
    return tokenizer


@dataclass(frozen=True)
class LoadedModel:
    config: ModelConfig
    tokenizer: Tokenizer | None  # text models only


ModelLookup = Callable[[str], LoadedModel]


class Models:
    """Lookup by model name. A model missing now is looked up again next time: it may be prepared later."""

    def __init__(self, repository: Path) -> None:
        self.repository = repository
        self._loaded: dict[str, LoadedModel] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> LoadedModel:
        with self._lock:
            model = self._loaded.get(name)
            if model is None:
                config = load_model_config(self.repository, name)
                tokenizer = load_tokenizer(config.tokenizer_path, config.max_length) if config.tokenizer else None
                model = self._loaded[name] = LoadedModel(config, tokenizer)
            return model
