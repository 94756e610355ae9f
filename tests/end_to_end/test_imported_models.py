"""Models users bring, imported with `nearline models import` and run with `nearline run` through
the real broker and workers: the results are what sentence-transformers and transformers give
directly on the same inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.byo_models import EXAMPLE, save_classifier, save_onnx, save_sentence_transformer
from tests.support.pipeline import run_embedded

ROWS = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()[:48]]
TEXTS = [r["text"] for r in ROWS]


def models_import(repository: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", "models", "import", *args, "--model-repository", str(repository)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_model(tmp_path: Path, repository: Path, model: str) -> list[dict[str, Any]]:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    out = tmp_path / f"{model}.jsonl"
    done = run_embedded(str(source), "--model", model, "-o", str(out), repository=repository, timeout_s=300)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["id"] for line in lines] == [r["id"] for r in ROWS]
    return lines


@pytest.mark.real_model
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("pooling", "normalize"),
    [("mean", True), ("mean", False), ("cls", True), ("cls", False), ("max", True), ("max", False)],
)
def test_an_imported_sentence_transformer_embeds_like_sentence_transformers(
    tmp_path: Path, pooling: str, normalize: bool
) -> None:
    from sentence_transformers import SentenceTransformer

    folder = save_sentence_transformer(tmp_path / "st", pooling, normalize)
    repository = tmp_path / "models"
    imported = models_import(repository, str(folder), "--name", "mine")
    assert imported.returncode == 0, imported.stderr

    listed = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "models", "list", "--model-repository", str(repository)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    name, version, task, detail, source = listed.stdout.strip().split("\t")
    assert (name, version, task) == ("mine", "1 (default)", "text-embedding")
    assert detail == f"{pooling} pooling" + (", normalized" if normalize else "")
    assert source.startswith(f"imported from {folder.resolve()} (sentence-transformers, BertModel, ")

    got = np.array([line["embedding"] for line in run_model(tmp_path, repository, "mine")], dtype=np.float64)
    want = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, batch_size=16).astype(np.float64)
    assert got.shape == want.shape
    cosine = (got * want).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() >= 0.999, f"worst {ROWS[int(cosine.argmin())]['id']}: {cosine.min():.6f}"
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.linalg.norm(want, axis=1), rtol=1e-3)


@pytest.mark.real_model
@pytest.mark.timeout(600)
@pytest.mark.parametrize("multi_label", [False, True])
def test_an_imported_classifier_labels_texts_like_transformers(tmp_path: Path, multi_label: bool) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = save_classifier(tmp_path / "clf", multi_label=multi_label)
    repository = tmp_path / "models"
    imported = models_import(repository, str(folder), "--name", "sentiment")
    assert imported.returncode == 0, imported.stderr
    lines = run_model(tmp_path, repository, "sentiment")

    model = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    with torch.no_grad():
        logits = model(**tokenizer(TEXTS, padding=True, truncation=True, max_length=128, return_tensors="pt")).logits
    scores = (torch.sigmoid(logits) if multi_label else torch.softmax(logits, dim=-1)).numpy()
    assert_labels(lines, scores.astype(np.float64), model.config.id2label)


def assert_labels(lines: list[dict[str, Any]], scores: np.ndarray, names: dict[int, str]) -> None:
    """Each line carries every label, best first, named and scored as `scores` has them."""
    tops = set()
    for line, row in zip(lines, scores, strict=True):
        order = np.argsort(-row, kind="stable")
        got = line["labels"]
        assert [g["index"] for g in got] == order.tolist(), line["id"]  # all 4 labels, best first
        assert [g["label"] for g in got] == [names[int(i)] for i in order]
        np.testing.assert_allclose([g["score"] for g in got], row[order], atol=0.01)
        tops.add(got[0]["label"])
    assert len(tops) >= 2  # a classifier that gives one label to everything would prove little


@pytest.mark.real_model
@pytest.mark.timeout(600)
def test_an_imported_image_classifier_uses_its_own_preprocessing_on_real_photos(tmp_path: Path) -> None:
    """A ViT whose processor resizes exactly to 224x224 with mean/std 0.5 (not EfficientNet's
    shorter side 256, centre crop 224, (x - 127) / 128), against transformers' own processor."""
    import shutil

    import torch
    from PIL import Image
    from transformers import AutoImageProcessor, ViTForImageClassification

    from tests.support.byo_models import save_vit
    from tests.support.image_corpus import real_photos

    folder = save_vit(tmp_path / "vit")
    repository = tmp_path / "models"
    imported = models_import(repository, str(folder), "--name", "vit")
    assert imported.returncode == 0, imported.stderr
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in real_photos():
        shutil.copy2(p, photos / f"{p.parent.name}-{p.name}")
    paths = sorted(photos.iterdir())
    out = tmp_path / "out.jsonl"
    done = run_embedded(str(photos), "--model", "vit", "-o", str(out), repository=repository, timeout_s=300)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == [p.name for p in paths]

    processor = AutoImageProcessor.from_pretrained(str(folder))
    model = ViTForImageClassification.from_pretrained(str(folder)).eval()
    images = [Image.open(p).convert("RGB") for p in paths]
    with torch.no_grad():
        probs = torch.softmax(model(**processor(images=images, return_tensors="pt")).logits, dim=-1).numpy()
    tops = set()
    for line, row in zip(lines, probs, strict=True):
        got = line["labels"]
        assert len(got) == 5
        assert got[0]["index"] == int(row.argmax()), line["id"]
        assert got[0]["label"] == f"class-{int(row.argmax())}"
        np.testing.assert_allclose([g["score"] for g in got], row[[g["index"] for g in got]], atol=0.05)
        tops.add(got[0]["index"])
    assert len(tops) >= 2


@pytest.mark.real_model
@pytest.mark.timeout(600)
def test_an_imported_model_onnx_classifier_labels_texts_like_transformers(tmp_path: Path) -> None:
    """A ready model.onnx (exported here with torch.onnx) whose task and labels come from its config.json."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = save_onnx(tmp_path / "clf", "text-classification")
    repository = tmp_path / "models"
    imported = models_import(repository, str(folder), "--name", "sentiment")
    assert imported.returncode == 0, imported.stderr
    lines = run_model(tmp_path, repository, "sentiment")

    source = tmp_path / "clf-source"  # the save_pretrained folder the graph was exported from
    model = AutoModelForSequenceClassification.from_pretrained(str(source)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    with torch.no_grad():
        logits = model(**tokenizer(TEXTS, padding=True, truncation=True, max_length=128, return_tensors="pt")).logits
    assert_labels(lines, torch.softmax(logits, dim=-1).numpy().astype(np.float64), model.config.id2label)


@pytest.mark.real_model
@pytest.mark.timeout(600)
def test_an_imported_model_onnx_embedder_pools_like_transformers(tmp_path: Path) -> None:
    """A ready model.onnx giving token vectors, imported with --task and --pooling cls."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = save_onnx(tmp_path / "enc", "text-embedding")
    config = (folder / "config.json").read_text()
    (folder / "config.json").unlink()  # nothing then says the task: --task must
    repository = tmp_path / "models"
    refused = models_import(repository, str(folder), "--name", "enc")
    assert refused.returncode == 2 and "say what it does with --task" in refused.stderr
    # nor its 128 positions: texts up to the tokenizer's 512 tokens would fail at the worker
    refused = models_import(repository, str(folder), "--name", "enc", "--task", "text-embedding")
    assert refused.returncode == 2, refused.stderr
    assert "does not run on a batch of texts up to 512 tokens" in refused.stderr
    assert not (repository / "enc").exists()
    without_architecture = {k: v for k, v in json.loads(config).items() if k != "architectures"}
    (folder / "config.json").write_text(json.dumps(without_architecture))
    imported = models_import(repository, str(folder), "--name", "enc", "--task", "text-embedding", "--pooling", "cls")
    assert imported.returncode == 0, imported.stderr
    got = np.array([line["embedding"] for line in run_model(tmp_path, repository, "enc")], dtype=np.float64)

    source = tmp_path / "enc-source"
    model = AutoModel.from_pretrained(str(source)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    with torch.no_grad():
        batch = tokenizer(TEXTS, padding=True, truncation=True, max_length=128, return_tensors="pt")
        want = model(**batch).last_hidden_state[:, 0].numpy().astype(np.float64)
    assert got.shape == want.shape == (len(TEXTS), 32)
    cosine = (got * want).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() >= 0.999, f"worst {ROWS[int(cosine.argmin())]['id']}: {cosine.min():.6f}"
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.linalg.norm(want, axis=1), rtol=1e-3)
