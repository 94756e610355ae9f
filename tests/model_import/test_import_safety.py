"""`nearline models import` never writes or deletes outside <repository>/<name>/<version>/, never
replaces a version unless told to, and stores any label a model names so that it comes back the
same, at the same index."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from model_import.import_source import ImportRefusedError
from model_import.importer import import_model
from model_repository.config import InvalidModelNameError, ModelUnavailableError
from model_repository.folders import load_model_config, read_labels, versions
from tests.support.byo_models import save_classifier, save_encoder


def tree(root: Path) -> dict[str, str]:
    """Every file under root with the sha256 of its bytes: what a refused import must leave as it was."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_encoder(tmp_path_factory.mktemp("enc") / "enc")


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory, encoder: Path) -> Path:
    repository = tmp_path_factory.mktemp("imported") / "models"
    import_model(repository, encoder, "a", "1")
    import_model(repository, encoder, "a", "2")
    return repository


@pytest.fixture
def home(tmp_path: Path, imported: Path) -> Path:
    """A folder holding an unrelated file and a repository with model `a` at versions 1 and 2."""
    (tmp_path / "unrelated.txt").write_text("keep me")
    shutil.copytree(imported, tmp_path / "models")
    return tmp_path


@pytest.mark.parametrize("version", ["..", "../..", "", ".", "../../evil", "1/../2", "/tmp/evil", ".hidden"])
def test_a_version_that_is_not_one_folder_is_refused_and_nothing_is_touched(
    home: Path, encoder: Path, version: str
) -> None:
    before = tree(home)
    with pytest.raises(InvalidModelNameError, match="invalid model version"):
        import_model(home / "models", encoder, "a", version)
    assert tree(home) == before
    assert not (home.parent / "evil").exists() and not Path("/tmp/evil").exists()


@pytest.mark.parametrize("name", ["..", "../a", "", ".", "a/1", "A"])
def test_a_name_that_is_not_one_folder_is_refused_and_nothing_is_touched(home: Path, encoder: Path, name: str) -> None:
    before = tree(home)
    with pytest.raises(InvalidModelNameError, match="invalid model name"):
        import_model(home / "models", encoder, name, "1")
    assert tree(home) == before


@pytest.mark.process
def test_the_cli_refuses_a_path_as_version_with_a_usage_error(home: Path, encoder: Path) -> None:
    before = tree(home)
    command = ["models", "import", str(encoder), "--name", "a", "--version", "..", "--model-repository"]
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", *command, str(home / "models")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert "invalid model version '..'" in done.stderr and "Traceback" not in done.stderr
    assert tree(home) == before


def test_an_existing_version_is_refused_unless_replace_and_replace_swaps_it_whole(home: Path, tmp_path: Path) -> None:
    repository = home / "models"
    other = save_encoder(tmp_path / "other", seed=7)
    before = tree(home)
    with pytest.raises(ImportRefusedError) as caught:
        import_model(repository, other, "a", "1")
    assert "a version 1 is already in" in str(caught.value)
    assert "--version 3" in str(caught.value) and "--replace" in str(caught.value)
    assert tree(home) == before

    old_weights = tree(repository / "a" / "1")["model.onnx"]
    replaced = import_model(repository, other, "a", "1", replace=True)
    assert replaced.directory == repository / "a" / "1"
    assert tree(repository / "a" / "1")["model.onnx"] != old_weights
    assert str(other.resolve()) in load_model_config(repository, "a", "1").source
    assert versions(repository, "a") == ["1", "2"]
    assert sorted(p.name for p in (repository / "a").iterdir()) == ["1", "2"]  # nothing set aside is left
    assert not [p for p in repository.iterdir() if p.name.startswith(".")]


@pytest.mark.process
def test_the_cli_names_replace_and_says_what_running_workers_keep(home: Path, tmp_path: Path) -> None:
    other = save_encoder(tmp_path / "other", seed=7)
    base = [sys.executable, "-m", "jobs.cli", "models", "import", str(other), "--name", "a", "--version", "2"]
    base += ["--model-repository", str(home / "models")]
    refused = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert "--replace" in refused.stderr and "nothing was imported" in refused.stderr
    done = subprocess.run([*base, "--replace"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "workers that loaded it keep serving it until they restart" in done.stderr


STRANGE_LABELS = {0: "neg\u2028ative", 1: "neu\ntral", 2: "pos\r\nitive", 3: "spam\x1c,\u0085 "}


@pytest.mark.process
def test_labels_with_line_breaks_come_back_whole_at_their_index(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from gpu_consumer.batcher import make_batch
    from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
    from gpu_consumer.postprocess import postprocess

    folder = save_classifier(tmp_path / "clf", labels=STRANGE_LABELS)
    config = import_model(tmp_path / "models", folder, "strange")
    assert read_labels(config) == tuple(STRANGE_LABELS[i] for i in range(4))

    texts = ["The with statement wraps a block.", "Lists are mutable sequences.", "Raise an exception here."]
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    reference = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        logits = reference(**tokenizer(texts, padding=True, return_tensors="pt")).logits.numpy()
    rows = [np.asarray(tokenizer(t)["input_ids"], dtype=np.int64) for t in texts]
    batch = make_batch(config, rows)
    got = postprocess(config, OnnxRuntimeEngine(config).infer(batch.inputs), batch, ())
    assert got.labels is not None
    best = [reference.config.id2label[int(i)] for i in logits.argmax(axis=1)]
    assert [labels[0] for labels in got.labels] == best

    shown = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "models", "list", "--model-repository", str(tmp_path / "models")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert "4 labels" in shown.stdout and "5 labels" not in shown.stdout


def test_a_label_file_that_does_not_match_the_outputs_makes_the_model_unavailable(tmp_path: Path) -> None:
    config = import_model(tmp_path / "models", save_classifier(tmp_path / "clf"), "clf")
    labels = config.directory / "labels.json"
    labels.write_text(json.dumps(["a", "b", "c", "d", "e"]))
    with pytest.raises(ModelUnavailableError, match="holds 5 labels for the model's 4 outputs"):
        load_model_config(tmp_path / "models", "clf")


def test_an_older_labels_txt_splits_on_newlines_only(tmp_path: Path) -> None:
    config = import_model(tmp_path / "models", save_classifier(tmp_path / "clf"), "clf")
    (config.directory / "labels.json").unlink()
    (config.directory / "labels.txt").write_text("a\u2028b\nc\x1cd\ne\nf\n", encoding="utf-8")
    raw = json.loads((config.directory / "config.json").read_text())
    (config.directory / "config.json").write_text(json.dumps({**raw, "labels_file": "labels.txt"}))
    assert read_labels(load_model_config(tmp_path / "models", "clf")) == ("a\u2028b", "c\x1cd", "e", "f")


def edit_config(folder: Path, **changes: object) -> None:
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_a_folder_without_a_tokenizer_says_so(tmp_path: Path) -> None:
    folder = save_encoder(tmp_path / "enc")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        (folder / name).unlink()
    with pytest.raises(ImportRefusedError) as caught:
        import_model(tmp_path / "models", folder, "mine")
    assert "has no tokenizer" in str(caught.value) and "vocab.txt" in str(caught.value)
    assert "stat:" not in str(caught.value) and "NoneType" not in str(caught.value)


def test_a_config_that_lies_about_hidden_size_is_not_blamed_on_the_labels(tmp_path: Path) -> None:
    folder = save_classifier(tmp_path / "clf")
    edit_config(folder, hidden_size=64, intermediate_size=128)
    with pytest.raises(ImportRefusedError) as caught:
        import_model(tmp_path / "models", folder, "mine")
    message = str(caught.value)
    assert "hidden_size" in message and "do not match the weights" in message
    assert "label map" not in message


def test_label_keys_with_gaps_are_named(tmp_path: Path) -> None:
    folder = save_classifier(tmp_path / "clf")
    edit_config(folder, id2label={"0": "a", "1": "b", "3": "c", "7": "d"})
    with pytest.raises(ImportRefusedError) as caught:
        import_model(tmp_path / "models", folder, "mine")
    assert "keys 0, 1, 3, 7 are not the output indices 0..3 (missing 2)" in str(caught.value)
