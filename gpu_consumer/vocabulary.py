"""The token ids a text model can look up: any other id is the record's fault, caught on the CPU.

A token id past the embedding table is an out-of-bounds gather in the engine. ONNX Runtime on the
CPU raises for that record's batch (bisected to the record: a dead letter), but torch on CUDA
trips a device-side assert, which leaves the CUDA context unusable: the worker must exit without
committing, and every worker that polls the record again dies the same way (gpu_consumer/
isolation.py counts it a fault). Preprocess workers only write ids their tokenizer made; any other
producer may write any id. So ids are checked against the model's tokenizer before a batch is
formed: once a pack (a max and a min over its ids), and per record only when the pack fails.
"""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path

import numpy as np

from model_repository.config import ModelConfig
from schemas.errors import TensorFormatError

log = logging.getLogger(__name__)


@cache
def _size_of(path: Path) -> int | None:
    from tokenizers import Tokenizer

    try:
        return int(Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True))
    except Exception as exc:  # any tokenizer file that does not load: no bound, said once
        log.warning("token ids are not checked against the vocabulary: %s does not load (%s)", path, exc)
        return None


def vocabulary_size(config: ModelConfig) -> int | None:
    """How many token ids the model's tokenizer knows (added tokens included); None for an image
    model, or a tokenizer file that is missing or does not load (ids are then not checked)."""
    if config.tokenizer is None:
        return None
    return _size_of(config.tokenizer_path)


def check_ids(name: str, ids: np.ndarray, size: int | None) -> None:
    """TensorFormatError when an id is negative or not below `size` (None: not checked)."""
    if size is None or not ids.size:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= size:
        bad = low if low < 0 else high
        raise TensorFormatError(f"{name}: token id {bad} is outside the model's vocabulary (0 to {size - 1})")
