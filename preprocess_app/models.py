"""The models this worker has tokenizers for, loaded from the model repository on first use."""

from __future__ import annotations

import threading
from pathlib import Path

from preprocess_app.text import TextModel, load_tokenizer
from schemas.model_config import load_model_config


class TextModels:
    """Lookup by model name. A model missing now is looked up again next time: it may be prepared later."""

    def __init__(self, repository: Path) -> None:
        self.repository = repository
        self._loaded: dict[str, TextModel] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> TextModel:
        with self._lock:
            model = self._loaded.get(name)
            if model is None:
                config = load_model_config(self.repository, name)
                model = TextModel(config, load_tokenizer(config.tokenizer_path, config.tokenizer.max_length))
                self._loaded[name] = model
            return model
