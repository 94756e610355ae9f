"""Text preprocessing as pure functions: raw.text records in, tensor records and dead letters out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer

from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import Topics
from preprocess_app.models import ModelLookup
from preprocess_app.outputs import dead_out, encoded_tensor_out
from schemas import SerdeError, Tensor, now_us
from schemas.model_config import ModelError, ModelNotFoundError
from schemas.raw_text_bytes import RawTextParts, read_raw_text
from schemas.tensor_record_bytes import TensorRecordBytes

# Tokenizers read the whole text before truncating, so a 10 MB text costs seconds for 256 tokens.
# No token is shorter than one character, and real ones average 4-5, so cutting at 32 characters
# per token keeps every token the truncation keeps.
CHARS_PER_TOKEN_BOUND = 32


def tokenize(
    tokenizer: Tokenizer, texts: Sequence[str], max_length: int, dtype: str | np.dtype = "int64"
) -> list[np.ndarray]:
    """Token ids per text, at most max_length long (special tokens included)."""
    limit = max_length * CHARS_PER_TOKEN_BOUND
    encodings = tokenizer.encode_batch([t[:limit] for t in texts])
    return [np.asarray(e.ids, dtype=dtype) for e in encodings]


def preprocess_texts(sources: Sequence[ConsumedRecord], models: ModelLookup, topics: Topics) -> list[OutRecord]:
    """Decode, tokenize and re-encode a batch. A record that fails becomes a dead letter; the rest go on.

    Records are read and written as bytes (schemas/raw_text_bytes.py, schemas/tensor_record_bytes.py):
    a TensorRecord repeats its RawText's ids and attributes as they are, and no record object is made."""
    started = now_us()
    out: list[OutRecord] = []
    by_model: dict[str, list[tuple[ConsumedRecord, RawTextParts]]] = {}
    for src in sources:
        try:
            raw = read_raw_text(src.value)
        except SerdeError as exc:
            out.append(dead_out(exc, src, topics))
            continue
        if not raw.text.strip():  # producers refuse these; other writers of raw.text may not
            out.append(dead_out(ValueError("text is empty"), src, topics, raw))
            continue
        by_model.setdefault(raw.model, []).append((src, raw))

    for name, items in by_model.items():
        try:
            model = models(name)
            if model.tokenizer is None:
                raise ModelNotFoundError(f"model {name!r} is for {model.config.task}, not for text")
        except ModelError as exc:  # a bad or unknown name, or a model that cannot be loaded
            out.extend(dead_out(exc, src, topics, raw) for src, raw in items)
            continue
        cfg = model.config
        ids_input = cfg.input_for("token_ids")
        assert ids_input is not None
        carried = np.dtype(model.token_dtype or ids_input.dtype).newbyteorder("<")  # tensors travel little-endian
        token_ids = tokenize(model.tokenizer, [raw.text for _, raw in items], cfg.max_length, carried)
        dtype = Tensor.from_array(ids_input.name, np.zeros(0, carried)).dtype
        write = TensorRecordBytes(cfg.name, cfg.version, ids_input.name, dtype, started, now_us())
        for (src, raw), ids in zip(items, token_ids, strict=True):
            value = write(raw.ids, ids.tobytes(), len(ids), raw.attributes_map, raw.submitted_at)
            out.append(encoded_tensor_out(topics, value, cfg.name, src, raw, raw.submitted_at))
    return out
