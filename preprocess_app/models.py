"""The models this worker preprocesses for, loaded from the model repository on first use.

A model that cannot be loaded (a corrupt config.json or tokenizer.json) is ModelUnavailableError:
the batch's records for it become dead letters saying so, and the worker goes on with the other
models. Crashing instead would only crash again on every redelivery of the same batch. The load
is retried on the next batch, so a repaired file takes effect without a restart, and `nearline
reprocess`/the dead letters show what to resubmit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from model_repository.config import ModelConfig, ModelError, ModelUnavailableError, token_id_dtype
from model_repository.folders import load_model_config

if TYPE_CHECKING:
    from preprocess_app.prompts import PromptRenderer

log = logging.getLogger(__name__)


def load_tokenizer(path: Path, max_length: int) -> Tokenizer:
    """The model's tokenizer, truncating to max_length and never padding: padding is the batcher's job.

    ModelUnavailableError when the file is missing or not a tokenizer."""
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
        raise ModelUnavailableError(f"model unavailable: {path} cannot be loaded as a tokenizer: {exc}") from None
    tokenizer.no_padding()  # the packaged MiniLM tokenizer.json pads everything to 128
    tokenizer.enable_truncation(max_length)
    return tokenizer


@dataclass(frozen=True)
class LoadedModel:
    config: ModelConfig
    tokenizer: Tokenizer | None  # text models only
    # The dtype token ids travel in, worked out once: get_vocab_size() builds the vocabulary
    # anew on every call (15 ms for MiniLM's), which per batch was half of tokenizing one.
    token_dtype: str | None = None
    prompts: PromptRenderer | None = None  # causal LMs: requests to prompt ids (prompts.py)

    @classmethod
    def load(cls, config: ModelConfig) -> LoadedModel:
        if config.tokenizer is None:
            return cls(config, None)
        if config.is_generator:
            from preprocess_app.prompts import PromptRenderer

            tokenizer = load_tokenizer(config.tokenizer_path, config.max_length)
            return cls(config, tokenizer, "int64", PromptRenderer(config))
        tokenizer = load_tokenizer(config.tokenizer_path, config.max_length)
        ids_input = config.input_for("token_ids")
        graph_dtype = ids_input.dtype if ids_input is not None else "int64"
        return cls(config, tokenizer, token_id_dtype(tokenizer.get_vocab_size(), graph_dtype))


ModelLookup = Callable[[str], LoadedModel]


class Models:
    """Lookup by model name. A model missing or unloadable now is looked up again next time: it may
    be prepared or repaired later. Raises InvalidModelNameError, ModelNotFoundError or
    ModelUnavailableError, each the records' dead-letter reason."""

    def __init__(self, repository: Path) -> None:
        self.repository = repository
        self._loaded: dict[str, LoadedModel] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> LoadedModel:
        with self._lock:
            model = self._loaded.get(name)
            if model is None:
                try:
                    model = LoadedModel.load(load_model_config(self.repository, name))
                except ModelUnavailableError as exc:
                    log.error("%s", exc)  # the operator's to fix; the records only say which model
                    raise
                self._loaded[name] = model
            return model


class ModelTopicsRefusedError(ModelError):
    """Kafka will not have the model's tensors topics (a name colliding with another topic's, too
    long, no Create permission): its records are dead letters saying why, and the worker goes on."""


class ServedModels:
    """A ModelLookup whose models' tensors topics exist before a record of theirs is preprocessed.

    `ensure(model)` creates the model's tensors topics and answers the refused ones with the
    reason (kafka_io.topics.try_ensure_topics). A refusal is ModelTopicsRefusedError, which the
    steps dead-letter like any model error: one record for such a model made the worker exit on
    every redelivery while every other job's records waited. It is asked again next time, so a
    permission granted or a colliding topic removed takes effect without a restart."""

    def __init__(self, models: ModelLookup, ensure: Callable[[str], dict[str, str]]) -> None:
        self.models, self.ensure = models, ensure
        self._ready: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, name: str) -> LoadedModel:
        model = self.models(name)
        served = model.config.name  # the name its tensors topic is named after
        with self._lock:
            if served not in self._ready:
                refused = self.ensure(served)
                if refused:
                    reasons = "; ".join(f"topic {topic} cannot be created: {why}" for topic, why in refused.items())
                    raise ModelTopicsRefusedError(f"model {served!r} cannot be served here: {reasons}")
                self._ready.add(served)
        return model
