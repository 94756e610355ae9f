"""Graph outputs to per-record results, per the model config. Pure numpy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from gpu_consumer.batcher import PaddedBatch
from schemas.model_config import ModelConfig
from schemas.result_encoding import RowTensor

Step = Callable[[np.ndarray, PaddedBatch], np.ndarray]


def mean_pooling(hidden: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    """Average of the token vectors that are not padding: [B, L, H] -> [B, H]."""
    mask = (np.arange(hidden.shape[1]) < batch.lengths[:, None]).astype(hidden.dtype)[:, :, None]
    return (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)


def l2_normalize(x: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def softmax(logits: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


STEPS: dict[str, Step] = {"mean_pooling": mean_pooling, "l2_normalize": l2_normalize, "softmax": softmax}


@dataclass(frozen=True)
class BatchOutput:
    """An executed batch's results: row i of every tensor (and labels[i]) belongs to record i."""

    tensors: list[RowTensor]
    labels: list[tuple[str, ...]] | None = None


@cache
def load_labels(path: Path) -> tuple[str, ...]:
    return tuple(path.read_text(encoding="utf-8").splitlines())


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
    if config.task == "image-classification":
        return top_k(config, x)
    return BatchOutput([RowTensor(config.result_name, x)])


def top_k(config: ModelConfig, scores: np.ndarray) -> BatchOutput:
    """The k best classes per row, best first, with their names from the model's labels file."""
    names = load_labels(config.directory / config.labels_file) if config.labels_file else ()
    order = np.argsort(-scores, axis=1, kind="stable")[:, : config.top_k]
    labels = [tuple(names[i] if i < len(names) else str(i) for i in idx) for idx in order.tolist()]
    top_scores = np.take_along_axis(scores, order, axis=1)
    return BatchOutput([RowTensor("top_index", order.astype(np.int64)), RowTensor("top_score", top_scores)], labels)
