"""Turning a batch of records into the model's inputs. Pure numpy, no I/O.

Text travels unpadded and is padded here, to the longest sequence of the batch: only the batcher
knows that length. Images travel as fixed-size uint8 CHW crops and are stacked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schemas.errors import TensorFormatError
from schemas.model_config import InputRole, ModelConfig, TensorSpec


@dataclass(frozen=True)
class PaddedBatch:
    inputs: dict[str, np.ndarray]
    lengths: np.ndarray  # real tokens per row (text); the row count for images

    @property
    def size(self) -> int:
        return len(self.lengths)

    @property
    def padded_tokens(self) -> int:
        return int(self.lengths.size * (self.lengths.max() if self.lengths.size else 0))


def carried_input(config: ModelConfig) -> TensorSpec:
    """The one graph input a record carries; the others are derived when batching."""
    for role in ("token_ids", "pixels"):
        spec = config.input_for(role)
        if spec is not None:
            return spec
    raise TensorFormatError(f"model {config.name}: no token_ids or pixels input in its config")


def check_record_input(config: ModelConfig, array: np.ndarray) -> None:
    """Raise TensorFormatError unless `array` is something this model can take as one record."""
    spec = carried_input(config)
    if array.dtype.name != spec.dtype:
        raise TensorFormatError(f"{spec.name}: dtype {array.dtype.name}, model {config.name} takes {spec.dtype}")
    if spec.role == "pixels":
        want = tuple(d for d in spec.dims[1:])
        if array.shape != want:
            raise TensorFormatError(f"{spec.name}: shape {list(array.shape)}, model {config.name} takes {list(want)}")
        return
    if array.ndim != 1:
        raise TensorFormatError(f"{spec.name}: shape {list(array.shape)}, expected one unbatched sequence")
    if not 1 <= len(array) <= config.max_length:
        raise TensorFormatError(f"{spec.name}: {len(array)} tokens, model {config.name} takes 1 to {config.max_length}")


def make_batch(config: ModelConfig, records: Sequence[np.ndarray]) -> PaddedBatch:
    spec = carried_input(config)
    if spec.role == "pixels":
        return PaddedBatch({spec.name: np.stack(records)}, np.zeros(len(records), dtype=np.int64))
    return pad_batch(config, records)


def pad_batch(config: ModelConfig, sequences: Sequence[np.ndarray]) -> PaddedBatch:
    """Pad token-id sequences to the longest in the batch and derive the mask and segment ids."""
    assert config.tokenizer is not None
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    width = int(lengths.max())
    derived: dict[InputRole | None, np.ndarray] = {
        "attention_mask": np.arange(width) < lengths[:, None],
        "token_type_ids": np.zeros((len(sequences), width), dtype=np.int64),
    }
    inputs: dict[str, np.ndarray] = {}
    for spec in config.inputs:
        if spec.role == "token_ids":
            ids = np.full((len(sequences), width), config.tokenizer.pad_id, dtype=spec.dtype)
            for row, seq in enumerate(sequences):
                ids[row, : len(seq)] = seq
            inputs[spec.name] = ids
        elif spec.role in derived:
            inputs[spec.name] = derived[spec.role].astype(spec.dtype)
        else:
            raise TensorFormatError(f"model {config.name}: input {spec.name} has no role the batcher knows")
    return PaddedBatch(inputs, lengths)


def warmup_batch(config: ModelConfig) -> PaddedBatch:
    """The largest batch the model accepts: max_batch_size records of the largest shape."""
    spec = carried_input(config)
    if spec.role == "pixels":
        shape = tuple(int(d) for d in spec.dims[1:])
        return make_batch(config, [np.full(shape, 127, dtype=spec.dtype)] * config.max_batch_size)
    assert config.tokenizer is not None
    row = np.full(config.max_length, config.tokenizer.pad_id + 1, dtype=spec.dtype)
    return pad_batch(config, [row] * config.max_batch_size)
