"""Turning a batch of unpadded records into the model's padded inputs. Pure numpy, no I/O.

Padding happens here and nowhere earlier: only the batcher knows the longest sequence that
travels with each record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schemas.errors import TensorFormatError
from schemas.model_config import ModelConfig


@dataclass(frozen=True)
class PaddedBatch:
    inputs: dict[str, np.ndarray]
    lengths: np.ndarray  # real tokens per row

    @property
    def size(self) -> int:
        return len(self.lengths)

    @property
    def padded_tokens(self) -> int:
        return int(self.lengths.size * (self.lengths.max() if self.lengths.size else 0))


def check_token_ids(config: ModelConfig, ids: np.ndarray) -> None:
    """Raise TensorFormatError unless `ids` is something this model can take as one record."""
    spec = config.input_for("token_ids")
    assert spec is not None
    if ids.dtype.name != spec.dtype:
        raise TensorFormatError(f"{spec.name}: dtype {ids.dtype.name}, model {config.name} takes {spec.dtype}")
    if ids.ndim != 1:
        raise TensorFormatError(f"{spec.name}: shape {list(ids.shape)}, expected one unbatched sequence")
    if not 1 <= len(ids) <= config.tokenizer.max_length:
        raise TensorFormatError(
            f"{spec.name}: {len(ids)} tokens, model {config.name} takes 1 to {config.tokenizer.max_length}"
        )


def pad_batch(config: ModelConfig, sequences: Sequence[np.ndarray]) -> PaddedBatch:
    """Pad token-id sequences to the longest in the batch and derive the mask and segment ids."""
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    width = int(lengths.max())
    inputs: dict[str, np.ndarray] = {}
    for spec in config.inputs:
        if spec.role == "token_ids":
            ids = np.full((len(sequences), width), config.tokenizer.pad_id, dtype=spec.dtype)
            for row, seq in enumerate(sequences):
                ids[row, : len(seq)] = seq
            inputs[spec.name] = ids
        elif spec.role == "attention_mask":
            inputs[spec.name] = (np.arange(width) < lengths[:, None]).astype(spec.dtype)
        elif spec.role == "token_type_ids":
            inputs[spec.name] = np.zeros((len(sequences), width), dtype=spec.dtype)
        else:
            raise TensorFormatError(f"model {config.name}: input {spec.name} has no role the batcher knows")
    return PaddedBatch(inputs, lengths)


def warmup_batch(config: ModelConfig) -> PaddedBatch:
    """The largest batch the model accepts: max_batch_size rows of max_length tokens."""
    spec = config.input_for("token_ids")
    assert spec is not None
    row = np.full(config.tokenizer.max_length, config.tokenizer.pad_id + 1, dtype=spec.dtype)
    return pad_batch(config, [row] * config.max_batch_size)
