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

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from tokenizers import Tokenizer

from kafka_io.limits import MAX_VALUE_BYTES, too_large
from kafka_io.records import (
    NO_REUSE_HEADER,
    REUSE_KEY_BYTES,
    ConsumedRecord,
    OutRecord,
    header_of,
    pack_record,
    with_reuse_keys,
)
from kafka_io.topology import Topics
from model_repository.config import ModelConfig, ModelError, ModelNotFoundError
from preprocess_app.lanes import topic_lane
from preprocess_app.models import ModelLookup
from preprocess_app.outputs import dead_out
from preprocess_app.prompts import PromptRenderer, request_for_encoder, with_sampling
from preprocess_app.reuse import (
    CachedModel,
    ReusedRecord,
    ReuseLookup,
    found,
    request_key,
    reused_result,
    text_key,
)
from schemas import SerdeError, now_us
from schemas.errors import NotUtf8Error
from schemas.generation_request import REQUEST_ATTRIBUTE, RequestError
from schemas.packs import (
    PackHead,
    PackSettings,
    RawTextPack,
    kind_of,
    pack_spans,
    read_raw_text_pack,
    tensor_pack_bytes,
)
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
class _Texts:
    """Texts that go on into the same tensor packs, column-wise (no object per record: a pack's
    records cost a Python object each only where one is needed): the good records of one input
    pack, or single records of one job submission and model from one topic (their lane)."""

    topic: str  # where they came from
    job_id: str
    submitted_at: int
    record_ids: list[str]
    seqs: Sequence[int] | np.ndarray
    texts: list[str]
    attributes: Sequence[Mapping[str, str]]
    # record i's dead letter, alone even when it came in a pack
    dead: Callable[[int, Exception], OutRecord]
    reusable: bool = True  # False: submitted with --no-reuse (its records' NO_REUSE_HEADER)
    keys: Sequence[bytes | None] | None = None  # reuse keys, where the records missed the cache


def _pack_texts(src: ConsumedRecord, pack: RawTextPack, topics: Topics, out: list[OutRecord]) -> _Texts:
    """A pack's records that go on; an empty one, or one that is not UTF-8, is dead-lettered here
    (producers refuse these, other writers of raw.text may not)."""
    bad = pack.undecodable  # not UTF-8: each its own dead letter, its neighbours go on
    kept = [i for i, t in enumerate(pack.texts) if t and not t.isspace() and i not in bad]
    attributes: Sequence[Mapping[str, str]]
    if len(kept) == len(pack):
        ids, seqs, texts, attributes = pack.record_ids, pack.seqs, pack.texts, pack.attributes
    else:
        for i in sorted(set(range(len(pack))) - set(kept)):
            error: Exception
            if i in bad:
                error = NotUtf8Error(bad[i][0])
            else:
                error = ValueError(f"text of record {pack.record_ids[i]!r} is empty")
            out.append(dead_out(error, src, topics, pack, packed=i))
        ids, seqs = [pack.record_ids[i] for i in kept], pack.seqs[kept]
        texts, attributes = [pack.texts[i] for i in kept], [pack.attributes[i] for i in kept]

    def dead(j: int, error: Exception) -> OutRecord:
        return dead_out(error, src, topics, pack, packed=kept[j])

    reusable = header_of(src.headers, NO_REUSE_HEADER) is None
    return _Texts(src.topic, pack.job_id, pack.submitted_at, ids, seqs, texts, attributes, dead, reusable)


def _single_texts(singles: list[tuple[ConsumedRecord, RawTextParts]], topics: Topics, reusable: bool) -> _Texts:
    first_src, first = singles[0]

    def dead(j: int, error: Exception) -> OutRecord:
        src, raw = singles[j]
        return dead_out(error, src, topics, raw)

    return _Texts(
        first_src.topic,
        first.job_id,
        first.submitted_at,
        [raw.record_id for _, raw in singles],
        [raw.seq for _, raw in singles],
        [raw.text for _, raw in singles],
        [raw.attributes for _, raw in singles],
        dead,
        reusable,
    )


def _read(sources: Sequence[ConsumedRecord], topics: Topics, out: list[OutRecord]) -> dict[str, list[_Texts]]:
    """The batch's texts by model; a source that cannot be read at all is a dead letter whole."""
    by_model: dict[str, list[_Texts]] = {}
    singles: dict[tuple[str, str, int, str, bool], list[tuple[ConsumedRecord, RawTextParts]]] = {}
    for src in sources:
        try:
            if kind_of(src.value) == "RawTextPack":
                pack = read_raw_text_pack(src.value)
                texts = _pack_texts(src, pack, topics, out)
                if texts.record_ids:
                    by_model.setdefault(pack.model, []).append(texts)
                continue
            raw = read_raw_text(src.value)
        except SerdeError as exc:  # not Avro, the other kind, or a malformed pack
            out.append(dead_out(exc, src, topics))
            continue
        if not raw.text.strip():  # producers refuse these; other writers of raw.text may not
            out.append(dead_out(ValueError(f"text of record {raw.record_id!r} is empty"), src, topics, raw))
            continue
        reusable = header_of(src.headers, NO_REUSE_HEADER) is None
        singles.setdefault((raw.job_id, raw.model, raw.submitted_at, src.topic, reusable), []).append((src, raw))
    for (_, model, _, _, reusable), group in singles.items():
        by_model.setdefault(model, []).append(_single_texts(group, topics, reusable))
    return by_model


def preprocess_texts(
    sources: Sequence[ConsumedRecord],
    models: ModelLookup,
    topics: Topics,
    limits: PackSettings | None = None,
    max_value_bytes: int = MAX_VALUE_BYTES,
    reuse: ReuseLookup | None = None,
) -> list[OutRecord]:
    """Decode, tokenize and pack a batch. A record that fails becomes a dead letter; the rest go on.
    With `reuse`, a record whose result is in its model's cache gets it from there instead
    (preprocess_app/reuse.py), and the rest carry their reuse key on.

    `limits` cut the tensor packs (by default schemas.packs' own); a pack is never over
    `max_value_bytes` (the broker's record limit): it is cut smaller, and a record too large alone
    is dead-lettered."""
    started = now_us()
    limits = limits or PackSettings()
    out: list[OutRecord] = []
    for name, groups in _read(sources, topics, out).items():
        try:
            model = models(name)
            if model.tokenizer is None:
                raise ModelNotFoundError(f"model {name!r} is for {model.config.task}, not for text")
        except ModelError as exc:  # a bad or unknown name, or a model that cannot be loaded
            out.extend(g.dead(j, exc) for g in groups for j in range(len(g.record_ids)))
            continue
        cfg = model.config
        ids_input = cfg.input_for("token_ids")
        assert ids_input is not None
        carried = np.dtype(model.token_dtype or ids_input.dtype).newbyteorder("<")  # tensors travel little-endian
        cached = reuse(cfg) if reuse is not None else None
        if model.prompts is not None:  # a causal LM: each text is a request (schemas/generation_request.py)
            if cached is not None:
                groups = _reuse(cached, groups, topics, out, started, functools.partial(request_key, cached.keys))
            groups, token_ids = _prompts(model.prompts, groups, out)
        else:  # every text of the model in one call, whichever record brought it
            groups = _not_requests(cfg, groups, out)
            if cached is not None:
                groups = _reuse(cached, groups, topics, out, started, text_key(cached.keys))
            token_ids = tokenize(model.tokenizer, [t for g in groups for t in g.texts], cfg.max_length, carried)
        stamps = {"preprocess_start": started, "preprocess_end": now_us()}
        at = 0
        for g in groups:
            arrays = token_ids[at : at + len(g.texts)]
            at += len(g.texts)
            # the records' lane is the topic they came in: their tensors go on in that lane
            topic = topics.lane(topics.tensors(cfg.name), topic_lane(topics, g.topic))
            timestamps = {"submitted": g.submitted_at, **stamps}
            # attributes are mostly empty: a map costs a sum only where it has entries
            own = RECORD_BYTES + (REUSE_KEY_BYTES if g.keys is not None else 0)  # a key's header bytes count too
            sizes = [
                ids.nbytes + len(r) + own + (sum(len(k) + len(v) for k, v in a.items()) if a else 0)
                for ids, r, a in zip(arrays, g.record_ids, g.attributes, strict=True)
            ]
            head = PackHead(g.job_id, cfg.name, cfg.version, ids_input.name, timestamps)
            write = functools.partial(_tensor_packs, topic, g, arrays, head, max_value_bytes)
            for start, end in pack_spans(sizes, limits):
                out.extend(write(start, end))
    return out


def _prompts(
    prompts: PromptRenderer, groups: list[_Texts], out: list[OutRecord]
) -> tuple[list[_Texts], list[np.ndarray]]:
    """Each request rendered to its prompt ids, its sampling parameters added to its attributes;
    a request that cannot run is dead-lettered alone (RequestError says why) and its neighbours go on."""
    kept_groups: list[_Texts] = []
    token_ids: list[np.ndarray] = []
    for g in groups:
        kept: list[int] = []
        attributes: list[Mapping[str, str]] = []
        for j, text in enumerate(g.texts):
            try:
                ids, sampling = prompts.render(text, g.attributes[j])
            except RequestError as exc:
                out.append(g.dead(j, exc))
                continue
            kept.append(j)
            token_ids.append(ids)
            attributes.append(with_sampling(g.attributes[j], sampling))
        if kept:
            kept_groups.append(_kept(g, kept, attributes))
    return kept_groups, token_ids


def _reuse(
    cached: CachedModel,
    groups: list[_Texts],
    topics: Topics,
    out: list[OutRecord],
    started: int,
    key_of: Callable[[str, Mapping[str, str] | None], bytes | None],
) -> list[_Texts]:
    """The groups less the records whose result the cache holds (each written to `out` as the
    record's result); the rest carry their reuse keys (key_of(text, attributes); None: never
    reused) on, so their results are cached."""
    kept_groups = []
    for g in groups:
        keys = [key_of(t, a) for t, a in zip(g.texts, g.attributes, strict=True)]
        # --no-reuse: computed, and its results still cached (they are what a fresh run writes)
        values = found(cached, keys) if g.reusable else None
        served: set[int] = set()
        if values is not None and any(v is not None for v in values):
            stamps = {"submitted": g.submitted_at, "preprocess_start": started}
            for j, value in enumerate(values):
                if value is None:
                    continue
                record = ReusedRecord(g.job_id, g.record_ids[j], int(g.seqs[j]), g.attributes[j] or {}, stamps)
                result = reused_result(value, cached.config, record, topics)
                if result is not None:
                    out.append(result)
                    served.add(j)
        keyed = replace(g, keys=keys) if any(k is not None for k in keys) else g
        if not served:  # all missed: the group goes on as it is (most records of a first run)
            kept_groups.append(keyed)
            continue
        kept = [j for j in range(len(g.texts)) if j not in served]
        if kept:
            kept_groups.append(_kept(keyed, kept, [g.attributes[j] for j in kept]))
    return kept_groups


def _not_requests(cfg: ModelConfig, groups: list[_Texts], out: list[OutRecord]) -> list[_Texts]:
    """The groups less their generation requests, each dead-lettered: this model does not generate."""
    kept_groups = []
    for g in groups:
        if request_for_encoder(g.attributes) is None:
            kept_groups.append(g)
            continue
        error = ModelError(f"model {cfg.name} is for {cfg.task}: it cannot answer a generation request")
        kept = []
        for j, a in enumerate(g.attributes):
            if a and REQUEST_ATTRIBUTE in a:
                out.append(g.dead(j, error))
            else:
                kept.append(j)
        if kept:
            kept_groups.append(_kept(g, kept, [g.attributes[j] for j in kept]))
    return kept_groups


def _kept(g: _Texts, kept: list[int], attributes: list[Mapping[str, str]]) -> _Texts:
    def dead(j: int, error: Exception) -> OutRecord:
        return g.dead(kept[j], error)

    return _Texts(
        g.topic,
        g.job_id,
        g.submitted_at,
        [g.record_ids[j] for j in kept],
        [int(g.seqs[j]) for j in kept],
        [g.texts[j] for j in kept],
        attributes,
        dead,
        g.reusable,
        [g.keys[j] for j in kept] if g.keys is not None else None,
    )


def _tensor_packs(
    topic: str,
    g: _Texts,
    arrays: Sequence[np.ndarray],
    head: PackHead,
    max_value_bytes: int,
    start: int,
    end: int,
) -> list[OutRecord]:
    """Records [start, end) of `g` as one tensor pack, or as several when one would be over the
    broker's record limit (halved until each fits); a record too large alone is dead-lettered,
    since the broker would refuse it on every redelivery and the worker must not stop on a
    record's size."""
    value = tensor_pack_bytes(
        head, g.record_ids[start:end], g.seqs[start:end], arrays[start:end], g.attributes[start:end]
    )
    keys = g.keys[start:end] if g.keys is not None else None
    if len(value) + (REUSE_KEY_BYTES * len(keys) if keys else 0) <= max_value_bytes:
        out = pack_record(topic, value, g.job_id, g.record_ids[start], end - start, g.submitted_at)
        return [with_reuse_keys(out, keys) if keys else out]
    if end - start == 1:
        return [g.dead(start, too_large(f"the tensor record of {g.record_ids[start]}", len(value)))]
    half = (start + end) // 2
    args = (topic, g, arrays, head, max_value_bytes)
    return [*_tensor_packs(*args, start, half), *_tensor_packs(*args, half, end)]
