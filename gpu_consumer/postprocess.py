"""Graph outputs to per-record results, per the model config's `postprocess` steps. Pure numpy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpu_consumer.batcher import PaddedBatch
from schemas.model_config import ModelConfig

Step = Callable[[np.ndarray, PaddedBatch], np.ndarray]


def mean_pooling(hidden: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    """Average of the token vectors that are not padding: [B, L, H] -> [B, H]."""
    mask = (np.arange(hidden.shape[1]) < batch.lengths[:, None]).astype(hidden.dtype)[:, :, None]
    return (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)


def l2_normalize(x: np.ndarray, batch: PaddedBatch) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


STEPS: dict[str, Step] = {"mean_pooling": mean_pooling, "l2_normalize": l2_normalize}


def postprocess(config: ModelConfig, outputs: dict[str, np.ndarray], batch: PaddedBatch) -> np.ndarray:
    """The first graph output through the configured steps; row i belongs to record i."""
    x = outputs[config.outputs[0].name]
    for name in config.postprocess:
        x = STEPS[name](x, batch)
    return x.astype(np.float32, copy=False)
