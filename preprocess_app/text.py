"""Text preprocessing as pure functions: raw.text records in, tensor records and dead letters out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from kafka_io.records import OutRecord, SourceRef
from kafka_io.settings import Topics
from schemas import DeadLetter, RawText, SerdeError, Tensor, TensorRecord, decode, encode, now_us
from schemas.model_config import ModelConfig, ModelNotFoundError

STAGE = "preprocess"
# Tokenizers read the whole text before truncating, so a 10 MB text costs seconds for 256 tokens.
# No token is shorter than one character, and real ones average 4-5, so cutting at 32 characters
# per token keeps every token the truncation keeps.
CHARS_PER_TOKEN_BOUND = 32


def load_tokenizer(path: Path, max_length: int) -> Tokenizer:
    """The model's tokenizer, truncating to max_length and never padding: padding is the batcher's job."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()  # the packaged MiniLM tokenizer.json pads everything to 128
    tokenizer.enable_truncation(max_length)
    return tokenizer


def tokenize(tokenizer: Tokenizer, texts: Sequence[str], max_length: int) -> list[np.ndarray]:
    """Token ids per text, int64, at most max_length long (special tokens included)."""
    limit = max_length * CHARS_PER_TOKEN_BOUND
    encodings = tokenizer.encode_batch([t[:limit] for t in texts])
    return [np.asarray(e.ids, dtype=np.int64) for e in encodings]


@dataclass(frozen=True)
class TextModel:
    config: ModelConfig
    tokenizer: Tokenizer


ModelLookup = Callable[[str], TextModel]


def preprocess_batch(sources: Sequence[SourceRef], models: ModelLookup, topics: Topics) -> list[OutRecord]:
    """Decode, tokenize and re-encode a batch. A record that fails becomes a dead letter; the rest go on."""
    started = now_us()
    out: list[OutRecord] = []
    by_model: dict[str, list[tuple[SourceRef, RawText]]] = {}
    for src in sources:
        try:
            raw = decode(src.value, RawText)
        except SerdeError as exc:
            out.append(_dead(exc, src, topics))
            continue
        by_model.setdefault(raw.model, []).append((src, raw))

    for name, items in by_model.items():
        try:
            model = models(name)
        except ModelNotFoundError as exc:
            out.extend(_dead(exc, src, topics, raw) for src, raw in items)
            continue
        cfg = model.config
        ids_input = cfg.input_for("token_ids")
        if ids_input is None:
            error = ModelNotFoundError(f"model {name!r} has no token_ids input: not a text model")
            out.extend(_dead(error, src, topics, raw) for src, raw in items)
            continue
        token_ids = tokenize(model.tokenizer, [raw.text for _, raw in items], cfg.tokenizer.max_length)
        finished = now_us()
        for (_, raw), ids in zip(items, token_ids, strict=True):
            record = TensorRecord(
                job_id=raw.job_id,
                record_id=raw.record_id,
                seq=raw.seq,
                model=cfg.name,
                model_version=cfg.version,
                tensors=(Tensor.from_array(ids_input.name, ids.astype(ids_input.dtype, copy=False)),),
                attributes=raw.attributes,
                timestamps={
                    "submitted": raw.submitted_at,
                    "preprocess_start": started,
                    "preprocess_end": finished,
                },
            )
            out.append(
                OutRecord(
                    topics.tensors(cfg.name),
                    encode(record),
                    key=record_key(raw.job_id, raw.record_id),
                    headers=[("job_id", raw.job_id.encode())],
                )
            )
    return out


def record_key(job_id: str, record_id: str) -> bytes:
    return f"{job_id}/{record_id}".encode()


def _dead(error: Exception, src: SourceRef, topics: Topics, raw: RawText | None = None) -> OutRecord:
    letter = DeadLetter.from_error(
        STAGE,
        error,
        (src.topic, src.partition, src.offset, src.value),
        job_id=raw.job_id if raw else None,
        record_id=raw.record_id if raw else None,
        model=raw.model if raw else None,
    )
    return OutRecord(topics.dead_letters, encode(letter), key=src.key)
