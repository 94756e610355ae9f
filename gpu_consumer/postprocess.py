"""Graph outputs to per-record results, per the model config. Pure numpy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpu_consumer.batcher import PaddedBatch
from model_repository.config import ModelConfig
from model_repository.folders import read_labels
from schemas.result_encoding import RowTensor

Step = Callable[[np.ndarray, PaddedBatch], np.ndarray]


# Pooling steps, [B, L, H] -> [B, H], as sentence-transformers' Pooling module computes them;
# rows are right-padded, so a row's real tokens are its first `lengths[i]`.


def _mask(hidden: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    return (np.arange(hidden.shape[1]) < batch.lengths[:, None]).astype(hidden.dtype)[:, :, None]


def mean_pooling(hidden: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    """Average of the token vectors that are not padding."""
    mask = _mask(hidden, batch)
    return (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)


def mean_sqrt_len_pooling(hidden: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    """Sum of the real token vectors over the square root of their count."""
    mask = _mask(hidden, batch)
    return (hidden * mask).sum(axis=1) / np.sqrt(np.maximum(mask.sum(axis=1), 1e-9))


def cls_pooling(hidden: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    """The first token's vector ([CLS] for BERT-style tokenizers)."""
    return hidden[:, 0]


def max_pooling(hidden: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    """Per dimension, the largest value over the real tokens (padding set to -1e9 first, as
    sentence-transformers does, so an all-negative dimension never reads a padding zero)."""
    return np.where(_mask(hidden, batch) > 0, hidden, np.asarray(-1e9, hidden.dtype)).max(axis=1)


def last_token_pooling(hidden: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    """The last real token's vector (decoder-style embedders)."""
    return hidden[np.arange(hidden.shape[0]), np.maximum(batch.lengths, 1) - 1]


def l2_normalize(x: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def softmax(logits: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def sigmoid(logits: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    """Independent label scores (multi-label classifiers); exp of -|x| never overflows."""
    e = np.exp(-np.abs(logits))
    return np.where(logits >= 0, 1 / (1 + e), e / (1 + e))


STEPS: dict[str, Step] = {
    "mean_pooling": mean_pooling,
    "mean_sqrt_len_pooling": mean_sqrt_len_pooling,
    "cls_pooling": cls_pooling,
    "max_pooling": max_pooling,
    "last_token_pooling": last_token_pooling,
    "l2_normalize": l2_normalize,
    "softmax": softmax,
    "sigmoid": sigmoid,
}


@dataclass(frozen=True)
class BatchOutput:
    """An executed batch's results: row i of every tensor (and labels[i]) belongs to record i."""

    tensors: list[RowTensor]
    labels: list[tuple[str, ...]] | None = None


def postprocess(
    config: ModelConfig, outputs: dict[str, np.ndarray], batch: PaddedBatch, done: Sequence[str]
) -> BatchOutput:
    """The first graph output through the configured steps the engine has not `done` already
    (its `postprocessed`: engines that pool on the device), then as result tensors."""
    x = outputs[config.outputs[0].name]
    for name in config.postprocess:
        if name not in done:
            x = STEPS[name](x, batch)
    x = x.astype(np.float32, copy=False)
    if config.is_classifier:
        return top_k(config, x)
    return BatchOutput([RowTensor(config.result_name, x)])


def top_k(config: ModelConfig, scores: np.ndarray) -> BatchOutput:
    """The k best classes per row, best first, with their names from the model's labels file."""
    names = read_labels(config)
    order = np.argsort(-scores, axis=1, kind="stable")[:, : config.top_k]
    labels = [tuple(names[i] if i < len(names) else str(i) for i in idx) for idx in order.tolist()]
    top_scores = np.take_along_axis(scores, order, axis=1)
    return BatchOutput([RowTensor("top_index", order.astype(np.int64)), RowTensor("top_score", top_scores)], labels)
