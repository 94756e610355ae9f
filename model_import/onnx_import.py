"""`nearline models import` of a folder with a ready `model.onnx`: its graph checked against the task
(input names, ranks, dtypes, a dynamic batch axis; the output's rank and width), then the file
copied into the repository with the folder's tokenizer and labels.

There is no torch module to trace, so such a model has no TorchScript: it runs on ONNX Runtime and
TensorRT (which builds its engine from the ONNX file); the torch engine refuses it at worker start
(engines.make_engine). Needs onnx and onnxruntime only, never torch or transformers (unless the
folder has only a slow tokenizer's files to build tokenizer.json from).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from model_import.import_source import ImportRefusedError, ImportTarget, label_file, weights_digest
from model_repository.config import (
    LABELS_FILE,
    ONNX_FILE,
    POOLING_STEPS,
    TOKENIZER_FILE,
    ModelConfig,
    TensorSpec,
    TokenizerSpec,
)

TEXT_ROLES = {"input_ids": "token_ids", "attention_mask": "attention_mask", "token_type_ids": "token_type_ids"}
ONNX_DTYPES = {1: "float32", 7: "int64", 10: "float16", 6: "int32", 2: "uint8"}


@dataclass(frozen=True)
class GraphTensor:
    name: str
    dtype: str
    dims: tuple[str | int, ...]  # an int is a static axis; a name (or "?" when unnamed) is dynamic


@dataclass(frozen=True)
class OnnxGraph:
    path: Path
    inputs: tuple[GraphTensor, ...]
    outputs: tuple[GraphTensor, ...]
    data_files: tuple[str, ...]  # external data files beside the graph, copied with it


def read_graph(path: Path) -> OnnxGraph:
    """The graph's inputs and outputs (initializers excluded), or ImportRefusedError when the file
    is not a loadable ONNX model."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    try:
        model = onnx.load(str(path), load_external_data=False)
        onnx.checker.check_model(model)  # a truncated file can still parse; the checker then fails
    except Exception as exc:  # protobuf's DecodeError, onnx's ValidationError, OSError...
        raise ImportRefusedError(f"{path} is not a valid ONNX model (truncated or not ONNX at all): {exc}") from None
    if not model.graph.output:
        raise ImportRefusedError(f"{path} is not a valid ONNX model: its graph has no outputs")
    data = sorted(
        {
            entry.value
            for tensor in model.graph.initializer
            if uses_external_data(tensor)
            for entry in tensor.external_data
            if entry.key == "location"
        }
    )
    for name in data:
        if not (path.parent / name).is_file():
            raise ImportRefusedError(f"{path}: its weights are in {name}, which is not in {path.parent}")
    initializers = {t.name for t in model.graph.initializer}
    inputs = tuple(_tensor(path, v) for v in model.graph.input if v.name not in initializers)
    return OnnxGraph(path, inputs, tuple(_tensor(path, v) for v in model.graph.output), tuple(data))


def _tensor(path: Path, value: Any) -> GraphTensor:
    kind = value.type.tensor_type
    dtype = ONNX_DTYPES.get(kind.elem_type, f"onnx type {kind.elem_type}")
    if not kind.HasField("shape"):
        raise ImportRefusedError(f"{path}: tensor {value.name!r} has no shape: export it with its rank")
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in kind.shape.dim)
    return GraphTensor(value.name, dtype, dims)


def import_onnx(target: ImportTarget) -> ModelConfig:
    """The checked graph, its tokenizer and labels as `name`/`version` of the repository."""
    import tempfile

    from model_import.export import _install
    from model_import.text_source import read_tokenizer

    repository, source, name, version = target.repository, target.source, target.name, target.version
    max_batch_size = target.max_batch_size

    folder = source.model_folder
    graph = read_graph(folder / ONNX_FILE)
    if source.task == "image-classification":
        raise ImportRefusedError(
            f"{folder}: an image classifier as a bare model.onnx is not supported: import the transformers "
            "save_pretrained folder (config.json, weights, preprocessor_config.json) it was exported from"
        )
    hf_config = _config(folder)
    inputs = _text_inputs(graph)
    classifier = source.task == "text-classification"
    output = _text_output(graph, classifier)
    hub = str(hf_config.get("_name_or_path", ""))
    with tempfile.TemporaryDirectory() as scratch:
        try:
            tok = read_tokenizer(source, SimpleNamespace(**hf_config), Path(scratch))
        except ImportRefusedError as exc:
            if hub and not Path(hub).exists():
                raise ImportRefusedError(
                    f"{exc}; config.json names the hub model {hub!r}, but nearline has no hub access and never "
                    "downloads: put that model's tokenizer.json in the folder"
                ) from None
            raise
        files = {TOKENIZER_FILE: tok.path}
        width = int(output.dims[-1])
        if classifier:
            files[LABELS_FILE] = label_file(_id2label(folder, hf_config), width, Path(scratch))
            problem = hf_config.get("problem_type")
            postprocess: tuple[str, ...] = ("sigmoid",) if problem == "multi_label_classification" else ("softmax",)
        else:
            assert source.pooling is not None
            postprocess = (POOLING_STEPS[source.pooling],) + (("l2_normalize",) if source.normalize else ())
        config = ModelConfig(
            name=name,
            version=version,
            task=source.task,
            inputs=tuple(TensorSpec(t.name, "int64", ("batch", "sequence"), TEXT_ROLES[t.name]) for t in inputs),  # type: ignore[arg-type]
            outputs=(TensorSpec(output.name, "float32", ("batch", *(() if classifier else ("sequence",)), width)),),
            max_batch_size=max_batch_size,
            postprocess=postprocess,
            tokenizer=TokenizerSpec(TOKENIZER_FILE, tok.max_length, tok.pad_id),
            labels_file=LABELS_FILE if classifier else None,
            result_name="labels" if classifier else "embedding",
            source=f"imported from {source.folder.resolve()} (onnx, {weights_digest(source)})",
        )
        rng = np.random.default_rng(0)
        low = min(1000, tok.vocab_size // 2)
        # the longest record the tokenizer lets through: a graph with fewer positions fails here, not at a worker
        lengths = (5, min(17, tok.max_length), tok.max_length)
        sample = [rng.integers(low, tok.vocab_size, size=n, dtype=np.int64) for n in lengths]
        try:
            return _install(
                repository,
                config,
                lambda d: _copy(graph, d),
                _reference(graph, output.name),
                sample,
                files,
                target.replace,
            )
        except ImportRefusedError:
            raise
        except Exception as exc:  # ONNX Runtime's own exception types
            raise ImportRefusedError(
                f"{graph.path} does not run on a batch of texts up to {tok.max_length} tokens (the tokenizer's "
                f"maximum length, capped by config.json's max_position_embeddings): {exc}"
            ) from None


def _text_inputs(graph: OnnxGraph) -> tuple[GraphTensor, ...]:
    where = graph.path
    for t in graph.inputs:
        if t.name not in TEXT_ROLES:
            raise ImportRefusedError(
                f"{where}: input {t.name!r} is not one nearline feeds a text model "
                f"({', '.join(TEXT_ROLES)}); export the graph with those input names"
            )
        if t.dtype != "int64" or len(t.dims) != 2:
            raise ImportRefusedError(
                f"{where}: input {t.name!r} is {t.dtype} of rank {len(t.dims)}: nearline feeds int64 [batch, sequence]"
            )
        for axis, label in ((0, "batch"), (1, "sequence")):
            if isinstance(t.dims[axis], int):
                raise ImportRefusedError(
                    f"{where}: input {t.name!r} has a static {label} axis ({t.dims[axis]}): export it with a "
                    f"dynamic one (torch.onnx.export dynamic_axes={{{t.name!r}: {{0: 'batch', 1: 'sequence'}}}})"
                )
    names = {t.name for t in graph.inputs}
    missing = [n for n in ("input_ids", "attention_mask") if n not in names]
    if missing:
        raise ImportRefusedError(f"{where}: the graph has no input {' or '.join(map(repr, missing))}")
    return graph.inputs


def _text_output(graph: OnnxGraph, classifier: bool) -> GraphTensor:
    """The output nearline reads: logits [batch, labels] or token vectors [batch, sequence, hidden]."""
    rank = 2 if classifier else 3
    preferred = ("logits",) if classifier else ("last_hidden_state", "token_embeddings")
    ranked = [t for t in graph.outputs if len(t.dims) == rank]
    if not ranked:
        what = "logits [batch, labels]" if classifier else "token vectors [batch, sequence, hidden] to pool"
        shapes = ", ".join(f"{t.name!r} {list(t.dims)}" for t in graph.outputs)
        raise ImportRefusedError(f"{graph.path}: no output of rank {rank} ({what}); it has {shapes}")
    output = next((t for t in ranked if t.name in preferred), ranked[0])
    if isinstance(output.dims[0], int):
        raise ImportRefusedError(
            f"{graph.path}: output {output.name!r} has a static batch axis ({output.dims[0]}): export it with a "
            "dynamic one"
        )
    if not isinstance(output.dims[-1], int):
        raise ImportRefusedError(
            f"{graph.path}: output {output.name!r} has no fixed width (last axis {output.dims[-1]!r})"
        )
    if output.dtype != "float32":
        raise ImportRefusedError(f"{graph.path}: output {output.name!r} is {output.dtype}, not float32")
    return output


def _config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        return {}
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ImportRefusedError(f"{path} cannot be read as JSON: {exc}") from None
    if not isinstance(loaded, dict):
        raise ImportRefusedError(f"{path} is not a JSON object")
    return loaded


def _id2label(folder: Path, hf_config: dict[str, Any]) -> dict[int, str]:
    labels = hf_config.get("id2label")
    if not isinstance(labels, dict) or not labels:
        raise ImportRefusedError(
            f"{folder}: a classifier's model.onnx needs a config.json with id2label naming its labels"
        )
    try:
        return {int(k): str(v) for k, v in labels.items()}
    except ValueError:
        raise ImportRefusedError(f"{folder / 'config.json'}: id2label keys must be label indices") from None


def _copy(graph: OnnxGraph, target: Path) -> None:
    shutil.copy2(graph.path, target / ONNX_FILE)
    for name in graph.data_files:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(graph.path.parent / name, target / name)


def _reference(graph: OnnxGraph, output: str) -> Any:
    """The user's file run as given: the installed copy, fed by nearline's batcher, must agree."""

    def run(batch: dict[str, np.ndarray]) -> np.ndarray:
        import onnxruntime as ort

        session = ort.InferenceSession(str(graph.path), providers=["CPUExecutionProvider"])
        return np.asarray(session.run([output], batch)[0])

    return run
