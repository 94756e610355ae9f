"""The preprocess step's reuse lookup (preprocess_app/reuse.py), broker-free: a first job's records
go on carrying their reuse keys; results cached under those keys (as the GPU worker caches them)
are written as a second job's results, with its ids and attributes, marked reused, and only the
rest is tokenized; a --no-reuse record, a cached value that does not decode or one of another
model version is computed."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from kafka_io.records import NO_REUSE_HEADER, REUSED_HEADER, ConsumedRecord, OutRecord, header_of, reuse_keys_of
from kafka_io.topology import Topics
from model_repository.config import ModelConfig
from preprocess_app.image import preprocess_images
from preprocess_app.models import Models
from preprocess_app.reuse import CachedResults, ReuseLookup
from preprocess_app.text import preprocess_texts
from reuse.store import ResultStore
from schemas import InferenceResult, RawImage, Tensor, TensorRecord, decode, encode
from schemas.attributes import REUSED_STAMP
from schemas.packs import TensorPack, raw_text_pack_bytes, read_tensor_pack
from tests.support.image_corpus import real_photos
from tests.support.records import value
from tests.support.tiny_model import TinyModel

TEXTS = ["the same text", "an edited text", "another text", "the last one"]
TOPICS = Topics("ns")


def pack(job_id: str, texts: list[str], headers: tuple[tuple[str, bytes], ...] = ()) -> ConsumedRecord:
    n = len(texts)
    body = raw_text_pack_bytes(
        job_id, "tiny", 5_000, [f"p{i}" for i in range(n)], list(range(n)), texts, [{"n": str(i)} for i in range(n)]
    )
    return ConsumedRecord("ns.raw.text", 0, 1, body, f"{job_id}/p0".encode(), (("records", str(n).encode()), *headers))


def packs_in(out: list[OutRecord]) -> list[TensorPack]:
    return [read_tensor_pack(value(o)) for o in out if o.topic == "ns.tensors.tiny"]


def keys_carried(out: list[OutRecord]) -> dict[str, bytes]:
    """Each tensor record's reuse key, by record id (its pack's header; its own attributes unchanged)."""
    carried: dict[str, bytes] = {}
    for o in out:
        if o.topic == "ns.tensors.tiny":
            p = read_tensor_pack(value(o))
            keys = reuse_keys_of(o.headers, len(p))
            assert keys is not None, "a pack of records that missed carries their keys"
            assert all(k is not None for k in keys), "every text has a key"
            assert all(REUSED_STAMP not in a and not set(a) - {"n"} for a in p.attributes)
            carried.update((r, k) for r, k in zip(p.record_ids, keys, strict=True) if k is not None)
    return carried


def cached_result(record_id: str, embedding: list[float], version: str = "1") -> bytes:
    """A result as a GPU worker writes it for job-a's record (and caches it under the record's key)."""
    outputs = (Tensor.from_array("embedding", np.asarray(embedding, dtype=np.float32)),)
    return encode(InferenceResult("job-a", record_id, 0, "tiny", version, outputs, "batch-7", 4, {"n": "x"}))


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    return ResultStore(tmp_path)


def lookup(store: ResultStore) -> ReuseLookup:
    def open_cache(config: ModelConfig) -> CachedResults:
        return store

    return ReuseLookup(open_cache)


def test_a_second_job_gets_the_cached_results_of_the_same_texts_and_computes_the_rest(
    tiny: TinyModel, model_repository: Path, store: ResultStore
) -> None:
    models = Models(model_repository)
    first = preprocess_texts([pack("job-a", TEXTS)], models, TOPICS, reuse=lookup(store))
    keys = keys_carried(first)
    assert sorted(keys) == ["p0", "p1", "p2", "p3"] and len(set(keys.values())) == 4
    assert all(len(k) == 32 for k in keys.values())
    assert not [o for o in first if o.topic == "ns.results"]  # nothing cached yet: all computed

    # the GPU worker cached job-a's results of p0 and p2 under their keys
    store.put(keys["p0"], cached_result("p0", [0.25, -1.5]))
    store.put(keys["p2"], cached_result("p2", [3.0, 0.5]))
    edited = [TEXTS[0], "an edited text, edited again", TEXTS[2], TEXTS[3]]
    second = preprocess_texts([pack("job-b", edited)], models, TOPICS, reuse=lookup(store))

    results = [o for o in second if o.topic == "ns.results"]
    assert [o.key for o in results] == [b"job-b/p0", b"job-b/p2"]
    assert all(header_of(o.headers, REUSED_HEADER) == b"1" for o in results)
    for o, want in zip(results, ([0.25, -1.5], [3.0, 0.5]), strict=True):
        result = decode(value(o), InferenceResult)
        assert (result.job_id, result.model, result.model_version) == ("job-b", "tiny", "1")
        assert result.outputs[0].to_array().tolist() == want
        assert result.attributes == {"n": result.record_id[1:]}  # the new record's own, no reuse key
        assert result.timestamps["submitted"] == 5_000 and REUSED_STAMP in result.timestamps
    assert [r.seq for r in (decode(value(o), InferenceResult) for o in results)] == [0, 2]
    # the edited text and the one never cached go on to be tokenized, carrying their keys
    carried = keys_carried(second)
    assert sorted(carried) == ["p1", "p3"]
    assert carried["p3"] == keys["p3"] and carried["p1"] != keys["p1"]


def test_a_no_reuse_record_is_computed_and_carries_its_key_so_its_result_is_cached_again(
    tiny: TinyModel, model_repository: Path, store: ResultStore
) -> None:
    models = Models(model_repository)
    keys = keys_carried(preprocess_texts([pack("job-a", TEXTS)], models, TOPICS, reuse=lookup(store)))
    for record_id, key in keys.items():
        store.put(key, cached_result(record_id, [1.0]))

    out = preprocess_texts([pack("job-b", TEXTS, ((NO_REUSE_HEADER, b"1"),))], models, TOPICS, reuse=lookup(store))

    assert not [o for o in out if o.topic == "ns.results"]
    assert keys_carried(out) == keys


def test_a_cached_value_that_does_not_decode_or_is_of_another_version_is_computed_with_a_warning(
    tiny: TinyModel, model_repository: Path, store: ResultStore, caplog: pytest.LogCaptureFixture
) -> None:
    models = Models(model_repository)
    keys = keys_carried(preprocess_texts([pack("job-a", TEXTS[:2])], models, TOPICS, reuse=lookup(store)))
    store.put(keys["p0"], b"\x00not an avro result")
    store.put(keys["p1"], cached_result("p1", [1.0], version="0"))

    with caplog.at_level(logging.WARNING):
        out = preprocess_texts([pack("job-b", TEXTS[:2])], models, TOPICS, reuse=lookup(store))

    assert not [o for o in out if o.topic == "ns.results"]
    assert sorted(keys_carried(out)) == ["p0", "p1"]
    assert "does not decode" in caplog.text and "tiny:0, not tiny:1" in caplog.text


def test_an_image_found_in_the_cache_is_answered_undecoded_and_the_others_carry_their_keys(
    efficientnet: ModelConfig, model_repository: Path, store: ResultStore
) -> None:
    photos = [p.read_bytes() for p in real_photos()[:3]]

    def images(job_id: str) -> list[ConsumedRecord]:
        raws = [
            RawImage(job_id, f"i{i}", i, "efficientnet-lite0", b, "image/jpeg", f"{i}.jpg", 7, {})
            for i, b in enumerate(photos)
        ]
        return [ConsumedRecord("ns.raw.image", 0, i, encode(r)) for i, r in enumerate(raws)]

    models = Models(model_repository)
    first = preprocess_images(images("job-a"), models, TOPICS, reuse=lookup(store))
    tensors = [o for o in first if o.topic == "ns.tensors.efficientnet-lite0"]
    keys: dict[str, bytes] = {}
    for o in tensors:
        (key,) = reuse_keys_of(o.headers, 1) or [b""]
        assert key is not None
        keys[decode(value(o), TensorRecord).record_id] = key
    assert sorted(keys) == ["i0", "i1", "i2"] and len(set(keys.values())) == 3
    outputs = (Tensor.from_array("top_score", np.asarray([0.5], dtype=np.float32)),)
    cached = InferenceResult("job-a", "i1", 1, "efficientnet-lite0", efficientnet.version, outputs, "b", 1, {})
    store.put(keys["i1"], encode(cached))

    second = preprocess_images(images("job-b"), models, TOPICS, reuse=lookup(store))

    (reused,) = [o for o in second if o.topic == "ns.results"]
    result = decode(value(reused), InferenceResult)
    assert (result.job_id, result.record_id, result.outputs) == ("job-b", "i1", outputs)
    assert result.attributes == {"source": '"1.jpg"'}
    again = [decode(value(o), TensorRecord) for o in second if o.topic == "ns.tensors.efficientnet-lite0"]
    assert [t.record_id for t in again] == ["i0", "i2"]


def test_a_cache_that_cannot_be_opened_computes_every_record_and_is_asked_again_next_batch(
    tiny: TinyModel, model_repository: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    opened: list[str] = []

    def no_room(config: ModelConfig) -> CachedResults:
        opened.append(config.name)
        raise OSError(28, "No space left on device", str(tmp_path / "reuse"))

    reuse = ReuseLookup(no_room)
    models = Models(model_repository)
    with caplog.at_level(logging.WARNING):
        for job_id in ("job-a", "job-b"):
            out = preprocess_texts([pack(job_id, TEXTS)], models, TOPICS, reuse=reuse)
            assert [len(p) for p in packs_in(out)] == [4] and not [o for o in out if o.topic == "ns.results"]
    assert opened == ["tiny", "tiny"]
    assert "the results cache cannot be opened" in caplog.text and "No space left" in caplog.text
