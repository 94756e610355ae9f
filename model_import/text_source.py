"""The tokenizer of a text model a user brings: its tokenizer.json (written from the slow
tokenizer's files when the folder has none), checked against the model's vocabulary, with the
padding id and the maximum length nearline will use."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_import.import_source import ImportRefusedError, ImportSource

# tokenizer_config.json's model_max_length when the tokenizer sets none (transformers' VERY_LARGE_INTEGER)
UNSET_LENGTH = 1_000_000


@dataclass(frozen=True)
class SourceTokenizer:
    path: Path  # a tokenizer.json
    vocab_size: int  # with added tokens: every id it can emit
    max_length: int
    pad_id: int


def read_tokenizer(source: ImportSource, hf: Any, scratch: Path) -> SourceTokenizer:
    from tokenizers import Tokenizer

    folder = source.model_folder
    path = folder / "tokenizer.json"
    if not path.is_file():
        path = _convert(folder, scratch)
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
        raise ImportRefusedError(f"{path} cannot be loaded as a tokenizer: {exc}") from None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    embeddings = int(getattr(hf, "vocab_size", 0) or 0)
    if embeddings and size > embeddings:
        raise ImportRefusedError(
            f"{path}: the tokenizer has {size} tokens but the model's embedding has {embeddings} rows "
            "(config.json vocab_size): it is not this model's tokenizer"
        )
    settings = _json(folder / "tokenizer_config.json")
    return SourceTokenizer(
        path, embeddings or size, _max_length(source, hf, settings), _pad_id(tokenizer, hf, settings)
    )


# The files a slow tokenizer is built from; a folder with none of them has no tokenizer at all.
SLOW_TOKENIZER_FILES = (
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "sentencepiece.model",
)


def _convert(folder: Path, scratch: Path) -> Path:
    """tokenizer.json from a folder with only the slow tokenizer's files (vocab.txt, sentencepiece)."""
    if not any((folder / name).is_file() for name in SLOW_TOKENIZER_FILES):
        raise ImportRefusedError(
            f"{folder} has no tokenizer: it holds no tokenizer.json, and none of {', '.join(SLOW_TOKENIZER_FILES)} "
            "to build one from; copy the model's tokenizer files into the folder (save_pretrained of its tokenizer)"
        )
    try:
        from transformers import AutoTokenizer

        fast = AutoTokenizer.from_pretrained(str(folder), use_fast=True)
        path = scratch / "tokenizer.json"
        fast.backend_tokenizer.save(str(path))
    except Exception as exc:
        raise ImportRefusedError(
            f"{folder} has no tokenizer.json and no tokenizer files to build one from: {exc}"
        ) from None
    return path


def _max_length(source: ImportSource, hf: Any, settings: dict[str, Any]) -> int:
    """sentence-transformers' max_seq_length, else the tokenizer's, never past the position table."""
    positions = int(getattr(hf, "max_position_embeddings", 512) or 512)
    wanted = source.max_length or int(settings.get("model_max_length") or UNSET_LENGTH)
    if wanted >= UNSET_LENGTH:
        wanted = 512
    return min(wanted, positions)


def _pad_id(tokenizer: Any, hf: Any, settings: dict[str, Any]) -> int:
    if tokenizer.padding:
        return int(tokenizer.padding["pad_id"])
    pad = settings.get("pad_token")
    pad = pad.get("content") if isinstance(pad, dict) else pad
    if isinstance(pad, str) and tokenizer.token_to_id(pad) is not None:
        return int(tokenizer.token_to_id(pad))
    return int(getattr(hf, "pad_token_id", None) or 0)


def _json(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
