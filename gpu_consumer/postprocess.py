"""Graph outputs to per-record results, per the model config. Pure numpy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from gpu_consumer.batcher import PaddedBatch
from schemas import Tensor
from schemas.model_config import ModelConfig

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
class RecordOutput:
    tensors: tuple[Tensor, ...]
    labels: tuple[str, ...] = ()


@cache
def load_labels(path: Path) -> tuple[str, ...]:
    return tuple(path.read_text(encoding="utf-8").splitlines())


def postprocess(config: ModelConfig, outputs: dict[str, np.ndarray], batch: PaddedBatch) -> list[RecordOutput]:
    """The first graph output through the configured steps, then packaged per record (row i = record i)."""
    x = outputs[config.outputs[0].name]
    for name in config.postprocess:
        x = STEPS[name](x, batch)
    x = x.astype(np.float32, copy=False)
    if config.task == "image-classification":
        return top_k(config, x)
    return [RecordOutput((Tensor.from_array(config.result_name, row),)) for row in x]


def top_k(config: ModelConfig, scores: np.ndarray) -> list[RecordOutput]:
    """The k best classes per row, best first, with their names from the model's labels file."""
    names = load_labels(config.directory / config.labels_file) if config.labels_file else ()
    order = np.argsort(-scores, axis=1, kind="stable")[:, : config.top_k]
    out = []
    for row, idx in zip(scores, order, strict=True):
        out.append(
            RecordOutput(
                (Tensor.from_array("top_index", idx.astype(np.int64)), Tensor.from_array("top_score", row[idx])),
                tuple(names[i] if i < len(names) else str(i) for i in idx),
            )
        )
    return out
