"""Small models in the layouts users bring (`nearline models import`), built here with seeded
random weights from transformers configs: no download. The MiniLM package's tokenizer files make
them real text models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.support.tiny_model import minilm_tokenizer_file

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
EXAMPLE = Path(__file__).parents[2] / "producers" / "examples" / "python-docs-paragraphs.jsonl"
LABELS = {0: "negative", 1: "neutral", 2: "positive", 3: "spam"}


def bert_config(**extra: Any) -> Any:
    from transformers import BertConfig

    shape = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
    return BertConfig(vocab_size=30522, num_hidden_layers=2, max_position_embeddings=128, **(shape | extra))


def copy_tokenizer(folder: Path) -> None:
    source = minilm_tokenizer_file().parent
    for name in TOKENIZER_FILES:
        shutil.copy2(source / name, folder / name)


def save_encoder(folder: Path, seed: int = 0) -> Path:
    """A bare BertModel in save_pretrained layout with the MiniLM tokenizer."""
    import torch
    from transformers import BertModel

    torch.manual_seed(seed)
    BertModel(bert_config()).eval().save_pretrained(str(folder))
    copy_tokenizer(folder)
    return folder


def save_sentence_transformer(folder: Path, pooling: str, normalize: bool, max_length: int = 64) -> Path:
    """The encoder as a sentence-transformers folder (modules.json, 1_Pooling, optional Normalize)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    encoder = save_encoder(folder.parent / f"{folder.name}-encoder")
    transformer = Transformer(str(encoder), max_seq_length=max_length)
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)]
    if normalize:
        modules.append(Normalize())
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


def save_classifier(
    folder: Path,
    multi_label: bool = False,
    labels: dict[int, str] = LABELS,
    seed: int = 0,
    calibrated: bool = True,
    hidden_size: int = 32,
) -> Path:
    """BertForSequenceClassification with named labels; its head is scaled up so a random model
    spreads its texts over several labels (calibrate). hidden_size 16 halves the files (the GPU carry)."""
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(seed)
    config = bert_config(
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
        problem_type="multi_label_classification" if multi_label else "single_label_classification",
    )
    model = BertForSequenceClassification(config).eval()
    if calibrated:
        calibrate(model, folder)
    model.save_pretrained(str(folder))
    copy_tokenizer(folder)
    return folder


def calibrate(model: Any, folder: Path) -> None:
    """Centre and scale a random head on real paragraphs: a random BERT's pooled vectors differ
    little from text to text, so its raw head gives every text the same label."""
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_tokenizer_file().parent))
    texts = [json.loads(line)["text"] for line in EXAMPLE.read_text(encoding="utf-8").splitlines()[-40:]]
    batch = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        pooled = model.bert(**batch).pooler_output
        weight = model.classifier.weight / (pooled.std(0) + 1e-6) * 4.0
        model.classifier.weight.copy_(weight)
        model.classifier.bias.copy_(-(pooled.mean(0) @ weight.T))


def save_vit(folder: Path, processor: dict[str, Any] | None = None, seed: int = 0) -> Path:
    """A tiny ViTForImageClassification (224x224, patch 32) with a ViT preprocessor config:
    exact resize to 224x224, mean/std 0.5, no centre crop."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(seed)
    labels = {i: f"class-{i}" for i in range(10)}
    config = ViTConfig(
        image_size=224,
        patch_size=32,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    model = ViTForImageClassification(config).eval()
    calibrate_vit(model)
    model.save_pretrained(str(folder))
    (folder / "preprocessor_config.json").write_text(json.dumps(processor or VIT_PROCESSOR, indent=2))
    return folder


def calibrate_vit(model: Any) -> None:
    """As calibrate, on the real photos' pixels with the ViT processing done by hand (any
    reasonable approximation spreads the labels; the test compares against transformers' own)."""
    import numpy as np
    import torch
    from PIL import Image

    from tests.support.image_corpus import real_photos

    pixels = [
        np.asarray(Image.open(p).convert("RGB").resize((224, 224), Image.Resampling.BILINEAR), dtype=np.float32)
        for p in real_photos()
    ]
    batch = torch.from_numpy((np.stack(pixels) / 255.0 - 0.5) / 0.5).permute(0, 3, 1, 2).float()
    with torch.no_grad():
        pooled = model.vit(pixel_values=batch).last_hidden_state[:, 0]
        weight = model.classifier.weight / (pooled.std(0) + 1e-6) * 2.0
        model.classifier.weight.copy_(weight)
        model.classifier.bias.copy_(-(pooled.mean(0) @ weight.T))


VIT_PROCESSOR = {
    "image_processor_type": "ViTImageProcessor",
    "do_resize": True,
    "size": {"height": 224, "width": 224},
    "resample": 2,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}


def save_onnx(folder: Path, task: str, **classifier: Any) -> Path:
    """A ready-ONNX folder as users bring one (an Optimum-style export): model.onnx exported here with
    torch.onnx from a seeded save_pretrained model, tokenizer.json and config.json, no weights.
    The save_pretrained folder the graph came from stays beside it, as `<folder>-source`."""
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    from model_import.export import _export
    from model_repository.config import TORCHSCRIPT_FILE, TORCHSCRIPT_FP16_FILE

    source = folder.parent / f"{folder.name}-source"
    classify = task == "text-classification"
    if classify:
        save_classifier(source, **classifier)
    else:
        save_encoder(source)
    auto = AutoModelForSequenceClassification if classify else AutoModel
    model = auto.from_pretrained(str(source), attn_implementation="eager").eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    output = "logits" if classify else "last_hidden_state"

    class Graph(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            return getattr(self.inner(**dict(zip(names, args, strict=True))), output)

    folder.mkdir(parents=True)
    example = tuple(torch.full((2, 8), 1000 if n == "input_ids" else int(n == "attention_mask")) for n in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in names} | {
        output: {0: "batch"} | ({} if classify else {1: "sequence"})
    }
    # nearline's own exporter (torch.onnx, opset 17), keeping only the graph: a user's ONNX folder has no TorchScript
    _export(Graph(model).eval(), example, folder, names, output, axes)
    for traced in (TORCHSCRIPT_FILE, TORCHSCRIPT_FP16_FILE):
        (folder / traced).unlink()
    shutil.copy2(source / "config.json", folder / "config.json")
    copy_tokenizer(folder)
    return folder
