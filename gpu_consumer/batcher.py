"""Cutting a poll window into executed batches and those into the model's inputs. Pure numpy, no I/O.

Text travels unpadded and is padded here, to the longest sequence of the batch: only the batcher
knows that length. Images travel as fixed-size uint8 CHW crops and are stacked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpu_consumer.cost_model import CostModel
from model_repository.config import InputRole, ModelConfig, TensorSpec
from schemas.errors import TensorFormatError


@dataclass(frozen=True)
class BatchSettings:
    """How the records of one poll window are cut into executed batches."""

    max_batch_size: int
    max_batch_tokens: int | None = None  # padded tokens per executed batch (text only)
    # For engines that pad to the longest record: a batch ends before the record that would make
    # more than this share of its tokens padding. 10% keeps batches large on sorted windows.
    max_padding_waste: float | None = 0.10
    # The engine's measured costs (gpu_consumer/cost_model.py): when known, a batch takes a longer
    # record unless the padding that adds costs more than a call, instead of the waste rule.
    cost: CostModel | None = None

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")


def default_window(max_batch_size: int) -> int:
    """The poll window when --max-window is not given: more than one executed batch's worth, so
    that sorting by length has something to sort."""
    return 8 * max_batch_size


def bucket_of(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds `length`; buckets are the engine's length profiles."""
    for bucket in buckets:
        if length <= bucket:
            return bucket
    return length


def plan_batches(
    lengths: Sequence[int], policy: BatchSettings, buckets: Sequence[int] = (), pad_to_bucket: bool = False
) -> list[list[int]]:
    """Indices of the window's records per executed batch (TEI's approach).

    Records are sorted by length so that a batch pads little. A batch holds at most
    max_batch_size records and, once padded, at most max_batch_tokens tokens. Static-shape engines
    (pad_to_bucket: TensorRT profiles, CUDA graphs) pad to the length bucket, so a batch never
    spans two buckets; engines that pad to the longest record cut instead where the padding a
    longer record adds costs more than another call (policy.cost), or, without a cost model, where
    padding would pass max_padding_waste. Images have length 0: plain chunking in arrival order.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])  # stable: ties keep arrival order
    plans: list[list[int]] = []
    current: list[int] = []
    current_bucket, current_width, real = -1, 0, 0
    for i in order:
        bucket = bucket_of(lengths[i], buckets)
        width = bucket if pad_to_bucket else lengths[i]  # sorted: the newest record is the longest
        rows = len(current) + 1
        cut = (
            rows > policy.max_batch_size
            or (policy.max_batch_tokens is not None and rows * width > policy.max_batch_tokens)
            or (pad_to_bucket and bucket != current_bucket)
            or (
                not pad_to_bucket
                and policy.cost is not None
                and not policy.cost.worth_widening(len(current), current_width, width)
            )
            or (
                not pad_to_bucket
                and policy.cost is None
                and policy.max_padding_waste is not None
                and width > 0
                and 1 - (real + lengths[i]) / (rows * width) > policy.max_padding_waste
            )
        )
        if current and cut:
            plans.append(current)
            current, real = [], 0
        current.append(i)
        current_bucket, current_width = bucket, width
        real += lengths[i]
    if current:
        plans.append(current)
    return plans


@dataclass(frozen=True)
class PaddedBatch:
    inputs: dict[str, np.ndarray]
    lengths: np.ndarray  # real tokens per row (text); the row count for images

    @property
    def size(self) -> int:
        return len(self.lengths)

    @property
    def width(self) -> int:
        """Padded sequence length (0 for images)."""
        inputs = iter(self.inputs.values())
        first = next(inputs)
        return int(first.shape[1]) if first.ndim == 2 else 0

    @property
    def padded_tokens(self) -> int:
        return self.size * self.width


def carried_input(config: ModelConfig) -> TensorSpec:
    """The one graph input a record carries; the others are derived when batching."""
    for role in ("token_ids", "pixels"):
        spec = config.input_for(role)
        if spec is not None:
            return spec
    raise TensorFormatError(f"model {config.name}: no token_ids or pixels input in its config")


def check_input_dtype(config: ModelConfig, dtype: np.dtype, spec: TensorSpec) -> None:
    """Raise TensorFormatError unless the carried input may travel as `dtype`: the graph's own, or
    token ids narrower than the graph takes them (model_repository.config.token_id_dtype), which
    padding widens. A pack's records share one dtype: checked once a pack."""
    graph = np.dtype(spec.dtype)
    if dtype != graph and not (spec.role == "token_ids" and dtype.kind in "iu" and dtype.itemsize < graph.itemsize):
        raise TensorFormatError(f"{spec.name}: dtype {dtype.name}, model {config.name} takes {spec.dtype}")


def check_record_input(config: ModelConfig, array: np.ndarray, spec: TensorSpec | None = None) -> None:
    """Raise TensorFormatError unless `array` is something this model can take as one record.

    `spec` is carried_input(config), for callers that check many records. Token ids may travel
    narrower than the graph takes them (model_repository.config.token_id_dtype): padding widens them."""
    spec = spec or carried_input(config)
    check_input_dtype(config, array.dtype, spec)
    if spec.role == "pixels":
        want = tuple(d for d in spec.dims[1:])
        if array.shape != want:
            raise TensorFormatError(f"{spec.name}: shape {list(array.shape)}, model {config.name} takes {list(want)}")
        return
    if array.ndim != 1:
        raise TensorFormatError(f"{spec.name}: shape {list(array.shape)}, expected one unbatched sequence")
    if not 1 <= len(array) <= config.max_length:
        raise TensorFormatError(f"{spec.name}: {len(array)} tokens, model {config.name} takes 1 to {config.max_length}")


def make_batch(config: ModelConfig, records: Sequence[np.ndarray], width: int | None = None) -> PaddedBatch:
    spec = carried_input(config)
    if spec.role == "pixels":
        return PaddedBatch({spec.name: np.stack(records)}, np.zeros(len(records), dtype=np.int64))
    return pad_batch(config, records, width)


def pad_batch(config: ModelConfig, sequences: Sequence[np.ndarray], width: int | None = None) -> PaddedBatch:
    """Pad token-id sequences to `width` (default: the longest in the batch) and derive the mask
    and segment ids."""
    assert config.tokenizer is not None
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    width = max(width or 0, int(lengths.max()))
    derived: dict[InputRole | None, np.ndarray] = {
        "attention_mask": np.arange(width) < lengths[:, None],
        "token_type_ids": np.zeros((len(sequences), width), dtype=np.int64),
    }
    inputs: dict[str, np.ndarray] = {}
    for spec in config.inputs:
        if spec.role == "token_ids":
            ids = np.full((len(sequences), width), config.tokenizer.pad_id, dtype=spec.dtype)
            # the mask's True cells, row by row, are the sequences' ids one after the other: two
            # calls in C, where a row at a time cost a Python-level assignment per record
            ids[derived["attention_mask"]] = np.concatenate(sequences) if len(sequences) > 1 else sequences[0]
            inputs[spec.name] = ids
        elif spec.role in derived:
            inputs[spec.name] = derived[spec.role].astype(spec.dtype)
        else:
            raise TensorFormatError(f"model {config.name}: input {spec.name} has no role the batcher knows")
    return PaddedBatch(inputs, lengths)


def edge_batches(config: ModelConfig) -> list[PaddedBatch]:
    """Each dimension at its largest once, not both at once: max_batch_size rows of a few tokens
    and one row of max_length (one image, for image models). A warm-up that checks every shape
    the model accepts works, at a small part of the largest batch's cost."""
    spec = carried_input(config)
    if spec.role == "pixels":
        shape = tuple(int(d) for d in spec.dims[1:])
        return [make_batch(config, [np.full(shape, 127, dtype=spec.dtype)] * min(2, config.max_batch_size))]
    assert config.tokenizer is not None
    token = config.tokenizer.pad_id + 1
    short = np.full(min(8, config.max_length), token, dtype=spec.dtype)
    return [
        pad_batch(config, [short] * config.max_batch_size),
        pad_batch(config, [np.full(config.max_length, token, dtype=spec.dtype)]),
    ]


def warmup_batch(config: ModelConfig) -> PaddedBatch:
    """The largest batch the model accepts: max_batch_size records of the largest shape."""
    return shaped_batch(config, config.max_batch_size)


def shaped_batch(config: ModelConfig, rows: int, length: int = 0) -> PaddedBatch:
    """`rows` records of `length` tokens each (0: max_length); for image models, `rows` images."""
    spec = carried_input(config)
    if spec.role == "pixels":
        shape = tuple(int(d) for d in spec.dims[1:])
        return make_batch(config, [np.full(shape, 127, dtype=spec.dtype)] * rows)
    assert config.tokenizer is not None
    row = np.full(length or config.max_length, config.tokenizer.pad_id + 1, dtype=spec.dtype)
    return pad_batch(config, [row] * rows)
