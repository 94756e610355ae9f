"""Text preprocessing as pure functions: raw.text packs (and single records) in, tensor packs and
dead letters out.

raw.text carries RawTextPacks (schemas/packs.py): many texts of one job submission in one Kafka
record. A single RawText still comes from foreign producers and `dlq replay`; every reader takes
both. A step tokenizes every text of a model in one call, whichever record brought it, and writes
its token ids as TensorPacks: those of an input pack go on as one or more packs of their own (cut
by bytes), and single records of one job submission, model and lane are packed together. A record
that fails is dead-lettered alone and its neighbours go on.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from kafka_io.limits import MAX_VALUE_BYTES, too_large
from kafka_io.records import ConsumedRecord, OutRecord, pack_record
from kafka_io.settings import Topics
from preprocess_app.lanes import topic_lane
from preprocess_app.models import ModelLookup
from preprocess_app.outputs import dead_out
from schemas import SerdeError, now_us
from schemas.model_config import ModelError, ModelNotFoundError
from schemas.packs import PackLimits, RawTextPack, kind_of, pack_spans, read_raw_text_pack, tensor_pack_bytes
from schemas.raw_text_bytes import RawTextParts, read_raw_text

# Tokenizers read the whole text before truncating, so a 10 MB text costs seconds for 256 tokens.
# No token is shorter than one character, and real ones average 4-5, so cutting at 32 characters
# per token keeps every token the truncation keeps.
CHARS_PER_TOKEN_BOUND = 32

# What a record adds to a pack besides its token ids, its record id and its attributes: its seq
# and its offset (8 bytes each) and Avro's length prefixes. Sizes only decide where packs are cut.
RECORD_BYTES = 32


def tokenize(
    tokenizer: Tokenizer, texts: Sequence[str], max_length: int, dtype: str | np.dtype = "int64"
) -> list[np.ndarray]:
    """Token ids per text, at most max_length long (special tokens included)."""
    limit = max_length * CHARS_PER_TOKEN_BOUND
    encodings = tokenizer.encode_batch([t[:limit] for t in texts])
    return [np.asarray(e.ids, dtype=dtype) for e in encodings]


@dataclass(frozen=True, slots=True)
class _Text:
    """One text of the batch, and where it came from: record `index` of `pack`, or a single record."""

    src: ConsumedRecord
    job_id: str
    record_id: str
    seq: int
    model: str
    text: str
    attributes: Mapping[str, str]
    submitted_at: int
    pack: RawTextPack | None = None
    index: int = 0
    single: RawTextParts | None = None

    def dead(self, error: Exception, topics: Topics) -> OutRecord:
        """This record's dead letter: alone, even when it came in a pack."""
        if self.pack is not None:
            return dead_out(error, self.src, topics, self.pack, packed=self.index)
        return dead_out(error, self.src, topics, self.single)


# Texts that go on into the same tensor packs: those of one input pack (by its identity), or single
# records of one job submission and model from one topic (which is their lane).
_Group = tuple[str, str, int, str] | int


def _texts(sources: Sequence[ConsumedRecord], topics: Topics, out: list[OutRecord]) -> Iterator[_Text]:
    """Every record of `sources`, packed or single; a source that cannot be read is a dead letter."""
    for src in sources:
        try:
            if kind_of(src.value) == "RawTextPack":
                pack = read_raw_text_pack(src.value)
                for i in range(len(pack)):
                    yield _Text(
                        src,
                        pack.job_id,
                        pack.record_ids[i],
                        int(pack.seqs[i]),
                        pack.model,
                        pack.texts[i],
                        pack.attributes[i],
                        pack.submitted_at,
                        pack,
                        i,
                    )
                continue
            raw = read_raw_text(src.value)
        except SerdeError as exc:  # not Avro, the other kind, or a malformed pack: dead-lettered whole
            out.append(dead_out(exc, src, topics))
            continue
        yield _Text(
            src, raw.job_id, raw.record_id, raw.seq, raw.model, raw.text, raw.attributes, raw.submitted_at, single=raw
        )


def preprocess_texts(
    sources: Sequence[ConsumedRecord],
    models: ModelLookup,
    topics: Topics,
    limits: PackLimits | None = None,
    max_value_bytes: int = MAX_VALUE_BYTES,
) -> list[OutRecord]:
    """Decode, tokenize and pack a batch. A record that fails becomes a dead letter; the rest go on.

    `limits` cut the tensor packs (by default schemas.packs' own); a pack is never over
    `max_value_bytes` (the broker's record limit): it is cut smaller, and a record too large alone
    is dead-lettered."""
    started = now_us()
    limits = limits or PackLimits()
    out: list[OutRecord] = []
    by_model: dict[str, list[_Text]] = {}
    for t in _texts(sources, topics, out):
        if not t.text.strip():  # producers refuse these; other writers of raw.text may not
            out.append(t.dead(ValueError(f"text of record {t.record_id!r} is empty"), topics))
            continue
        by_model.setdefault(t.model, []).append(t)

    for name, items in by_model.items():
        try:
            model = models(name)
            if model.tokenizer is None:
                raise ModelNotFoundError(f"model {name!r} is for {model.config.task}, not for text")
        except ModelError as exc:  # a bad or unknown name, or a model that cannot be loaded
            out.extend(t.dead(exc, topics) for t in items)
            continue
        cfg = model.config
        ids_input = cfg.input_for("token_ids")
        assert ids_input is not None
        carried = np.dtype(model.token_dtype or ids_input.dtype).newbyteorder("<")  # tensors travel little-endian
        token_ids = tokenize(model.tokenizer, [t.text for t in items], cfg.max_length, carried)
        stamps = {"preprocess_start": started, "preprocess_end": now_us()}
        groups: dict[_Group, list[tuple[_Text, np.ndarray]]] = {}
        for t, ids in zip(items, token_ids, strict=True):
            key: _Group = id(t.pack) if t.pack is not None else (t.job_id, t.model, t.submitted_at, t.src.topic)
            groups.setdefault(key, []).append((t, ids))
        for group in groups.values():
            first = group[0][0]
            # the records' lane is the topic they came in: their tensors go on in that lane
            topic = topics.lane(topics.tensors(cfg.name), topic_lane(topics, first.src.topic))
            timestamps = {"submitted": first.submitted_at, **stamps}
            sizes = [
                ids.nbytes + len(t.record_id) + sum(len(k) + len(v) for k, v in t.attributes.items()) + RECORD_BYTES
                for t, ids in group
            ]
            for start, end in pack_spans(sizes, limits):
                out.extend(
                    _tensor_packs(
                        topics,
                        topic,
                        group[start:end],
                        cfg.name,
                        cfg.version,
                        ids_input.name,
                        timestamps,
                        max_value_bytes,
                    )
                )
    return out


def _tensor_packs(
    topics: Topics,
    topic: str,
    records: Sequence[tuple[_Text, np.ndarray]],
    model: str,
    version: str,
    tensor: str,
    timestamps: Mapping[str, int],
    max_value_bytes: int,
) -> list[OutRecord]:
    """`records` as one tensor pack, or as several when one would be over the broker's record
    limit (halved until each fits); a record too large alone is dead-lettered, since the broker
    would refuse it on every redelivery and the worker must not stop on a record's size."""
    texts = [t for t, _ in records]
    first = texts[0]
    value = tensor_pack_bytes(
        first.job_id,
        model,
        version,
        [t.record_id for t in texts],
        [t.seq for t in texts],
        tensor,
        [ids for _, ids in records],
        [t.attributes for t in texts],
        timestamps,
    )
    if len(value) <= max_value_bytes:
        return [pack_record(topic, value, first.job_id, first.record_id, len(records), first.submitted_at)]
    if len(records) == 1:
        return [first.dead(too_large(f"the tensor record of {first.record_id}", len(value)), topics)]
    half = len(records) // 2
    return [
        *_tensor_packs(topics, topic, records[:half], model, version, tensor, timestamps, max_value_bytes),
        *_tensor_packs(topics, topic, records[half:], model, version, tensor, timestamps, max_value_bytes),
    ]
