"""What a folder a user brings holds, read from its JSON files alone (no framework imported):
its layout, task, pooling and where its weights are. `nearline models import` starts here, so a
folder that cannot work is refused before anything is loaded or exported.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from model_repository.config import LABELS_FILE, ONNX_FILE, POOLING_STEPS, TASKS, Task
from model_repository.folders import write_labels

Layout = Literal["sentence-transformers", "transformers", "onnx"]
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# sentence-transformers' Pooling flags, in the order its Pooling module concatenates them
ST_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_weightedmean_tokens": "weighted_mean",
    "pooling_mode_lasttoken": "last_token",
}
# sentence-transformers 6 saves one key, "pooling_mode", with these names (it still reads the flags)
ST_POOLING_MODES = {
    "cls": "cls",
    "mean": "mean",
    "max": "max",
    "mean_sqrt_len_tokens": "mean_sqrt_len",
    "weightedmean": "weighted_mean",
    "lasttoken": "last_token",
}
ARCHITECTURE_TASKS: tuple[tuple[str, Task], ...] = (
    ("ForCausalLM", "text-generation"),  # imported by causal_lm.py, kept as a transformers folder
    ("ForSequenceClassification", "text-classification"),
    ("ForImageClassification", "image-classification"),
    ("Model", "text-embedding"),  # a bare encoder: BertModel, XLMRobertaModel, ...
)


class ImportRefusedError(ValueError):
    """A model `nearline models import` will not import; the message says which and why."""


@dataclass(frozen=True)
class ImportSource:
    folder: Path  # what the user named
    layout: Layout
    model_folder: Path  # config.json, weights and tokenizer (a sentence-transformers module's path)
    task: Task
    architecture: str  # config.json's, or "ONNX graph"
    pooling: str | None = None  # text-embedding: a POOLING_STEPS mode
    normalize: bool = False
    # sentence_bert_config.json's max_seq_length; sentence-transformers 6 writes none (its length is
    # tokenizer_config.json's model_max_length, text_source.py's fallback)
    max_length: int | None = None


def read_source(folder: Path, task: str | None = None, pooling: str | None = None) -> ImportSource:
    """The layout of `folder` and what it holds, or ImportRefusedError saying why it cannot be imported."""
    if task is not None and task not in TASKS:
        raise ImportRefusedError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    if pooling is not None and pooling not in POOLING_STEPS:
        raise ImportRefusedError(f"unknown pooling {pooling!r}: use one of {', '.join(POOLING_STEPS)}")
    if folder.is_file():
        raise ImportRefusedError(f"{folder} is a file: import takes a local model folder or a .gguf file")
    if not folder.is_dir():
        raise ImportRefusedError(f"{folder} is not a folder: import takes a local model folder, never a hub id")
    adapter = _json(folder / "adapter_config.json")
    if adapter is not None:
        raise ImportRefusedError(
            f"{folder} holds a PEFT adapter for {adapter.get('base_model_name_or_path')!r}, not a model: merge it "
            "into its base model (merge_and_unload), save_pretrained the result and import that folder"
        )
    if (folder / "modules.json").is_file():
        return _sentence_transformers(folder, task, pooling)
    if (folder / ONNX_FILE).is_file():  # an ONNX folder (ours, or optimum's export) names its graph alike
        return _onnx(folder, task, pooling)
    if (folder / "config.json").is_file():
        return _transformers(folder, task, pooling)
    raise ImportRefusedError(
        f"{folder} is not a model folder: it has no modules.json (sentence-transformers), "
        "config.json (transformers save_pretrained) or model.onnx"
    )


def _sentence_transformers(folder: Path, task: str | None, pooling: str | None) -> ImportSource:
    modules = _json(folder / "modules.json")
    if not isinstance(modules, list):
        raise ImportRefusedError(f"{folder / 'modules.json'} is not a list of modules")
    if task not in (None, "text-embedding"):
        raise ImportRefusedError(
            f"{folder} is a sentence-transformers embedder: its task is text-embedding, not {task}"
        )
    transformer: Path | None = None
    mode: str | None = None
    normalize = False
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        path = folder / module.get("path", "")
        if kind == "Transformer" and transformer is None:
            transformer = path
        elif kind == "Pooling" and mode is None:
            mode = _st_pooling(path / "config.json")
        elif kind == "Normalize":
            normalize = True
        else:
            raise ImportRefusedError(
                f"{folder}: sentence-transformers module {module.get('type')!r} ({module.get('path')!r}) is not "
                "supported: nearline imports Transformer, Pooling and Normalize"
            )
    if transformer is None:
        raise ImportRefusedError(f"{folder}: modules.json lists no Transformer module")
    inner = _transformers(transformer, None, None)
    if inner.task == "text-generation":
        raise ImportRefusedError(
            f"{transformer}: architecture {inner.architecture!r} cannot be imported as a sentence-transformers "
            "Transformer module: import a causal LM's own folder to generate with it"
        )
    st_config = _json(transformer / "sentence_bert_config.json") or _json(folder / "sentence_bert_config.json") or {}
    max_length = st_config.get("max_seq_length")
    return ImportSource(
        folder,
        "sentence-transformers",
        transformer,
        "text-embedding",
        inner.architecture,
        pooling or mode or "mean",
        normalize,
        int(max_length) if max_length else None,
    )


def _onnx(folder: Path, task: str | None, pooling: str | None) -> ImportSource:
    """A ready model.onnx: its task from --task, else from config.json's architecture."""
    config = _json(folder / "config.json")
    architectures = (config.get("architectures") if isinstance(config, dict) else None) or []
    architecture = str(architectures[0]) if architectures else ""
    found = next((t for suffix, t in ARCHITECTURE_TASKS if architecture.endswith(suffix)), None)
    if task is None and found is None:
        raise ImportRefusedError(
            f"{folder} holds model.onnx and no config.json architecture to tell its task: say what it does "
            f"with --task ({', '.join(TASKS)})"
        )
    chosen: Task = task or found  # type: ignore[assignment]
    if chosen == "text-generation":
        raise ImportRefusedError(
            f"{folder}: a causal LM's model.onnx cannot be imported: nearline generates with its transformers "
            "folder (config.json, safetensors, tokenizer.json) or a .gguf file; import one of those"
        )
    return ImportSource(folder, "onnx", folder, chosen, "ONNX graph", _pooling(chosen, pooling))


def _st_pooling(path: Path) -> str:
    config = _json(path)
    if config is None:
        raise ImportRefusedError(f"{path} is missing: the Pooling module's configuration")
    named = config.get("pooling_mode")  # sentence-transformers 6: one name or a list; it wins over the flags
    if named is not None:
        modes = [ST_POOLING_MODES.get(str(m), str(m)) for m in (named if isinstance(named, list) else [named])]
    else:
        modes = [mode for key, mode in ST_POOLING_KEYS.items() if config.get(key)]
    if len(modes) != 1:
        raise ImportRefusedError(f"{path}: pooling modes {modes or 'none'}: nearline supports exactly one")
    if modes[0] not in POOLING_STEPS:
        raise ImportRefusedError(f"{path}: pooling mode {modes[0]!r} is not supported ({', '.join(POOLING_STEPS)})")
    return modes[0]


def _transformers(folder: Path, task: str | None, pooling: str | None) -> ImportSource:
    config = _json(folder / "config.json")
    if not isinstance(config, dict):
        raise ImportRefusedError(f"{folder / 'config.json'} is missing or not a JSON object")
    if not any((folder / f).is_file() for f in WEIGHT_FILES):
        named = str(config.get("_name_or_path", ""))
        if named and not Path(named).exists():
            raise ImportRefusedError(
                f"{folder}: config.json names the hub model {named!r} but the folder holds no weights "
                f"({' or '.join(WEIGHT_FILES[::2])}); nearline never downloads: save_pretrained the model "
                "into a folder and import that"
            )
        raise ImportRefusedError(f"{folder} holds no weights: no {' or '.join(WEIGHT_FILES[::2])}")
    architectures = config.get("architectures") or []
    architecture = str(architectures[0]) if architectures else ""
    found = next((t for suffix, t in ARCHITECTURE_TASKS if architecture.endswith(suffix)), None)
    if found is None:
        raise ImportRefusedError(
            f"{folder}: architecture {architecture or 'none'!r} cannot be imported: nearline imports "
            "*ForCausalLM, *ForSequenceClassification, *ForImageClassification and bare encoders (*Model)"
        )
    if task is not None and task != found:
        raise ImportRefusedError(f"{folder}: {architecture} is a {found} model, not {task}")
    return ImportSource(folder, "transformers", folder, found, architecture, _pooling(found, pooling))


def _pooling(task: Task, pooling: str | None) -> str | None:
    if task != "text-embedding":
        if pooling is not None:
            raise ImportRefusedError(f"--pooling is for text-embedding models, not {task}")
        return None
    return pooling or "mean"


def _json(path: Path) -> Any:
    """The parsed file, None when it does not exist; a file that is not JSON is refused."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ImportRefusedError(f"{path} cannot be read as JSON: {exc}") from None


@dataclass(frozen=True)
class ImportTarget:
    """Where and as what a loaded model is installed, and the scratch folder for its extra files."""

    repository: Path
    source: ImportSource
    name: str
    version: str
    max_batch_size: int
    provenance: str
    scratch: Path
    replace: bool = False


def label_file(id2label: dict[int, str], width: int, scratch: Path) -> Path:
    """labels.json from config.json's id2label, refused unless it names every output exactly once."""
    keys = sorted(id2label)
    if keys != list(range(width)):
        shown = ", ".join(map(str, keys[:8])) + (", ..." if len(keys) > 8 else "")
        if len(keys) != width:
            why = f"has {len(keys)} labels (keys {shown}) for the model's {width} outputs"
        else:
            missing = sorted(set(range(width)) - set(keys))[:8]
            why = f"keys {shown} are not the output indices 0..{width - 1} (missing {', '.join(map(str, missing))})"
        raise ImportRefusedError(f"the label map (config.json id2label) {why}")
    return write_labels(scratch / LABELS_FILE, [id2label[i] for i in range(width)])


def weights_digest(source: ImportSource) -> str:
    """sha256 of the weights file, so two imports can be told apart from their configs."""
    for candidate in ("model.safetensors", "pytorch_model.bin", ONNX_FILE):
        path = source.model_folder / candidate
        if path.is_file():
            h = hashlib.sha256()
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            return f"{candidate} sha256 {h.hexdigest()[:16]}"
    return "sharded weights"
