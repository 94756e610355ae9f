"""`nearline models import`: a model folder a user brings (model_import/import_source.py) exported
into the model repository as ONNX plus the FP32 and FP16 TorchScript the torch engine runs.

Needs the `export` extra (torch, transformers). Everything is loaded from the folder with the hub
offline; export.py's _install checks ONNX Runtime against torch before the version appears.
"""

from __future__ import annotations

import inspect
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from model_import.export import _export, _install
from model_import.image_processor import ImageProcessorError, PixelScaling, read_image_processor
from model_import.import_source import (
    ImportRefusedError,
    ImportTarget,
    label_file,
    read_source,
    weights_digest,
)
from model_import.install import ExportUnavailableError, refuse_existing
from model_repository.config import (
    LABELS_FILE,
    POOLING_STEPS,
    TOKENIZER_FILE,
    ModelConfig,
    TensorSpec,
    TokenizerSpec,
    check_model_name,
    check_model_version,
)


def import_model(
    repository: Path,
    folder: Path,
    name: str,
    version: str = "1",
    task: str | None = None,
    pooling: str | None = None,
    max_batch_size: int = 64,
    replace: bool = False,
) -> ModelConfig:
    """The model in `folder` as `name`/`version` of the repository, or ImportRefusedError saying why
    not. An existing `name`/`version` is refused unless `replace`: workers that loaded it keep
    serving it until they restart, so one name and version would give two outputs."""
    check_model_name(name)
    check_model_version(version)
    refuse_existing(repository, name, version, replace)
    gguf = folder.is_file() and folder.suffix.lower() == ".gguf"  # llama.cpp's format: always a causal LM
    if gguf and (task not in (None, "text-generation") or pooling is not None):
        raise ImportRefusedError(f"{folder} is a GGUF causal LM: its task is text-generation, with no --pooling")
    source = None if gguf else read_source(folder, task, pooling)
    if source is None or source.task == "text-generation":  # kept as a transformers folder: causal_lm.py
        from model_import.causal_lm import import_causal_lm

        lm = folder if source is None else source.model_folder
        return import_causal_lm(repository, lm, name, version, max_batch_size, replace)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a file the folder lacks is an error, never a download
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if source.layout == "onnx":
        from model_import.onnx_import import import_onnx

        return import_onnx(ImportTarget(repository, source, name, version, max_batch_size, "", Path(), replace))
    try:
        import torch
        import transformers
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        raise ExportUnavailableError(
            f"importing needs the export extra: pip install 'nearline[export]' ({exc.name})"
        ) from None
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    torch.manual_seed(0)
    auto = {
        "text-embedding": transformers.AutoModel,
        "text-classification": transformers.AutoModelForSequenceClassification,
        "image-classification": transformers.AutoModelForImageClassification,
    }[source.task]
    cannot = f"{source.model_folder}: {source.architecture} cannot be loaded"
    try:
        # Weights whose shapes differ from config.json's are loaded here and refused below, from
        # the loading info's (parameter, weights' shape, config's shape): transformers 5 raises
        # for them only with a message that points at a report it logs.
        model, info = auto.from_pretrained(
            str(source.model_folder),
            attn_implementation="eager",
            ignore_mismatched_sizes=True,
            output_loading_info=True,
        )
    except Exception as exc:  # transformers raises OSError, ValueError, RuntimeError...
        raise ImportRefusedError(f"{cannot}: {str(exc).strip()}") from None
    if info.get("mismatched_keys"):
        order = {key: i for i, key in enumerate(model.state_dict())}
        found = sorted(
            ((str(p), tuple(int(d) for d in w), tuple(int(d) for d in c)) for p, w, c in info["mismatched_keys"]),
            key=lambda m: (order.get(m[0], len(order)), m[0]),
        )
        labels = json.loads((source.model_folder / "config.json").read_text(encoding="utf-8")).get("id2label", {})
        raise ImportRefusedError(
            f"{cannot}: {_mismatch(found, None if source.task == 'text-embedding' else len(labels))}"
        )
    model.eval()
    provenance = f"imported from {folder.resolve()} ({source.layout}, {source.architecture}, {weights_digest(source)})"
    with tempfile.TemporaryDirectory() as extra:
        target = ImportTarget(repository, source, name, version, max_batch_size, provenance, Path(extra), replace)
        return (_import_image if source.task == "image-classification" else _import_text)(target, model)


def _import_text(target: ImportTarget, model: Any) -> ModelConfig:
    source, name, version = target.source, target.name, target.version
    max_batch_size, provenance, scratch = target.max_batch_size, target.provenance, target.scratch
    import torch

    from model_import.text_source import read_tokenizer

    hf = model.config
    tok = read_tokenizer(source, hf, scratch)
    names = ["input_ids", "attention_mask"]
    roles = {"input_ids": "token_ids", "attention_mask": "attention_mask", "token_type_ids": "token_type_ids"}
    if "token_type_ids" in inspect.signature(model.forward).parameters:
        names.append("token_type_ids")
    inputs = tuple(TensorSpec(n, "int64", ("batch", "sequence"), roles[n]) for n in names)  # type: ignore[arg-type]
    classifier = source.task == "text-classification"

    class TextGraph(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            out = self.inner(**dict(zip(names, args, strict=True)))
            return out.logits if classifier else out.last_hidden_state

    graph = TextGraph(model).eval()
    rng = np.random.default_rng(0)
    low, high = min(1000, tok.vocab_size // 2), tok.vocab_size
    sample = [rng.integers(low, high, size=n, dtype=np.int64) for n in (5, min(17, tok.max_length), 3)]

    def reference(batch: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            return graph(*[torch.from_numpy(batch[n]) for n in names]).numpy()

    files = {TOKENIZER_FILE: tok.path}
    if classifier:
        labels = label_file(_id2label(hf), _width(reference, names, tok.pad_id), scratch)
        files[LABELS_FILE] = labels
        output = "logits"
        problem = getattr(hf, "problem_type", None)
        if problem == "regression":
            raise ImportRefusedError(
                f"{source.model_folder}: problem_type 'regression' is a regressor, not a classifier"
            )
        postprocess: tuple[str, ...] = ("sigmoid",) if problem == "multi_label_classification" else ("softmax",)
        out_dims: tuple[str | int, ...] = ("batch", hf.num_labels)
    else:
        output = "token_embeddings"
        assert source.pooling is not None
        postprocess = (POOLING_STEPS[source.pooling],) + (("l2_normalize",) if source.normalize else ())
        out_dims = ("batch", "sequence", int(hf.hidden_size))
    config = ModelConfig(
        name=name,
        version=version,
        task=source.task,
        inputs=inputs,
        outputs=(TensorSpec(output, "float32", out_dims),),
        max_batch_size=max_batch_size,
        postprocess=postprocess,
        tokenizer=TokenizerSpec(TOKENIZER_FILE, tok.max_length, tok.pad_id),
        labels_file=LABELS_FILE if classifier else None,
        result_name="labels" if classifier else "embedding",
        source=provenance,
    )
    fill = {"input_ids": low, "attention_mask": 1, "token_type_ids": 0}
    example = tuple(torch.full((2, 16), fill[n], dtype=torch.int64) for n in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes[output] = {0: "batch"} if classifier else {0: "batch", 1: "sequence"}
    return _install_checked(
        target, config, lambda d: _export(graph, example, d, names, output, axes), reference, sample, files
    )


def _import_image(target: ImportTarget, model: Any) -> ModelConfig:
    source, name, version = target.source, target.name, target.version
    max_batch_size, provenance, scratch = target.max_batch_size, target.provenance, target.scratch
    import torch

    processor = source.model_folder / "preprocessor_config.json"
    if not processor.is_file():
        raise ImportRefusedError(f"{source.model_folder} has no preprocessor_config.json: its image preprocessing")
    try:
        spec, scaling = read_image_processor(json.loads(processor.read_text(encoding="utf-8")))
    except ImageProcessorError as exc:
        raise ImportRefusedError(f"{source.model_folder}: {exc}") from None
    except ValueError as exc:
        raise ImportRefusedError(f"{processor} cannot be read as JSON: {exc}") from None
    graph = ScaledImageClassifier.build(model, scaling)

    def reference(batch: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            return graph(torch.from_numpy(batch["pixels"])).numpy()

    rng = np.random.default_rng(0)
    sample = [rng.integers(0, 256, size=(3, spec.crop, spec.crop), dtype=np.uint8) for _ in range(3)]
    try:
        width = reference({"pixels": np.stack(sample[:1])}).shape[-1]
    except Exception as exc:
        raise ImportRefusedError(
            f"{source.model_folder}: {source.architecture} fails on {spec.crop}x{spec.crop} images: {exc}"
        ) from None
    labels = label_file(_id2label(model.config), width, scratch)
    config = ModelConfig(
        name=name,
        version=version,
        task="image-classification",
        inputs=(TensorSpec("pixels", "uint8", ("batch", 3, spec.crop, spec.crop), "pixels"),),
        outputs=(TensorSpec("logits", "float32", ("batch", width)),),
        max_batch_size=max_batch_size,
        postprocess=("softmax",),
        image=spec,
        labels_file=LABELS_FILE,
        result_name="labels",
        source=provenance,
    )
    example = (torch.zeros(2, 3, spec.crop, spec.crop, dtype=torch.uint8),)
    axes = {"pixels": {0: "batch"}, "logits": {0: "batch"}}
    files = {LABELS_FILE: labels}
    return _install_checked(
        target, config, lambda d: _export(graph, example, d, ["pixels"], "logits", axes), reference, sample, files
    )


class ScaledImageClassifier:
    """Builds the graph that takes uint8 CHW pixels: x * (rescale / std) - mean / std, then the model."""

    @staticmethod
    def build(model: Any, scaling: PixelScaling) -> Any:
        import torch

        class Graph(torch.nn.Module):
            scale: torch.Tensor
            shift: torch.Tensor

            def __init__(self, inner: torch.nn.Module) -> None:
                super().__init__()
                self.inner = inner
                std = torch.tensor(scaling.std).view(1, 3, 1, 1)
                # buffers, not constants: a traced FP16 copy follows the weights' dtype (export.py)
                self.register_buffer("scale", scaling.rescale / std)
                self.register_buffer("shift", torch.tensor(scaling.mean).view(1, 3, 1, 1) / std)

            def forward(self, pixels: torch.Tensor) -> torch.Tensor:
                return self.inner(pixel_values=pixels.type_as(self.scale) * self.scale - self.shift).logits

        return Graph(model).eval()


def _width(reference: Any, names: list[str], pad_id: int) -> int:
    probe = {n: np.ones((1, 4), dtype=np.int64) for n in names}
    probe["input_ids"] = np.full((1, 4), pad_id + 1, dtype=np.int64)
    if "token_type_ids" in probe:
        probe["token_type_ids"][:] = 0
    return int(reference(probe).shape[-1])


def _id2label(hf: Any) -> dict[int, str]:
    return {int(k): str(v) for k, v in (getattr(hf, "id2label", None) or {}).items()}


def _mismatch(found: list[tuple[str, tuple[int, ...], tuple[int, ...]]], labels: int | None) -> str:
    """Which part of config.json disagrees with the weights, from each (parameter, its shape in
    the weights, its shape from config.json). A head whose only differing axis is the label count
    was edited apart from id2label; any other axis (hidden_size, intermediate_size, vocab_size...)
    is the architecture's numbers."""

    def label_axis_only(weights: tuple[int, ...], config: tuple[int, ...]) -> bool:
        return len(weights) == len(config) and all(w == c or c == labels for w, c in zip(weights, config, strict=True))

    shown = "; ".join(f"{p}: {list(w)} in the weights, {list(c)} from config.json" for p, w, c in found[:3])
    if labels is not None and all(label_axis_only(w, c) for _, w, c in found):
        return f"the label map (config.json id2label, {labels} labels) does not match the weights' head: {shown}"
    return (
        f"config.json's sizes (hidden_size, intermediate_size, vocab_size...) do not match the weights: "
        f"{shown}{'; ...' if len(found) > 3 else ''}"
    )


def _install_checked(
    target: ImportTarget,
    config: ModelConfig,
    export: Any,
    reference: Any,
    sample: list[np.ndarray],
    files: dict[str, Path],
) -> ModelConfig:
    try:
        return _install(target.repository, config, export, reference, sample, files, target.replace)
    except ImportRefusedError:
        raise
    except Exception as exc:  # the exporters raise anything; what matters is the model and the reason
        raise ImportRefusedError(f"{config.name}: export refused, nothing was written: {exc}") from None
