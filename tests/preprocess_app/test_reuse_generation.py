"""Generation requests reused before any CPU work (preprocess_app/reuse.py), broker-free, on a
seeded tiny Llama with SmolLM2's tokenizer and chat template: a greedy request and a seeded
sampled one found in the cache are written as the new job's results, marked reused, with the new
record's ids and its own attributes (never the internal request mark); a request sampled without
a seed is never looked up and carries no key, so its result is never cached; another max_tokens
is another key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kafka_io.records import REUSED_HEADER, ConsumedRecord, OutRecord, header_of, reuse_keys_of
from kafka_io.topology import Topics
from model_import.causal_lm import import_causal_lm
from model_repository.config import ModelConfig
from preprocess_app.models import Models
from preprocess_app.reuse import CachedResults, ReuseLookup
from preprocess_app.text import preprocess_texts
from reuse.store import ResultStore
from schemas import InferenceResult, Tensor, decode, encode
from schemas.attributes import REUSED_STAMP
from schemas.generation_request import REQUEST_ATTRIBUTE
from schemas.packs import raw_text_pack_bytes, read_tensor_pack
from tests.support.records import value

MODEL = "tiny-llama"
TOPICS = Topics("ns")
REQUESTS: dict[str, dict[str, Any]] = {
    "greedy": {"prompt": "Once upon a time", "params": {"max_tokens": 4}},
    "chat": {"messages": [{"role": "user", "content": "Say hello"}], "params": {"max_tokens": 3}},
    "seeded": {"prompt": "The sea", "params": {"max_tokens": 4, "temperature": 0.8, "seed": 7}},
    "unseeded": {"prompt": "The sky", "params": {"max_tokens": 4, "temperature": 0.8}},
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory, tiny_llama_folder: Path) -> Path:
    return import_causal_lm(tmp_path_factory.mktemp("generators"), tiny_llama_folder, MODEL).directory.parents[1]


def requests_pack(job_id: str, requests: dict[str, dict[str, Any]]) -> ConsumedRecord:
    ids = list(requests)
    body = raw_text_pack_bytes(
        job_id,
        MODEL,
        5_000,
        ids,
        list(range(len(ids))),
        [json.dumps(requests[i]) for i in ids],
        [{REQUEST_ATTRIBUTE: "1", "n": str(k)} for k, _ in enumerate(ids)],
    )
    return ConsumedRecord(
        "ns.raw.text", 0, 1, body, f"{job_id}/{ids[0]}".encode(), (("records", str(len(ids)).encode()),)
    )


def tensors_of(out: list[OutRecord]) -> dict[str, bytes | None]:
    """Each request that goes on to the GPU stage, by record id, and the reuse key its pack carries for it."""
    keys: dict[str, bytes | None] = {}
    for o in out:
        if o.topic.startswith(f"ns.tensors.{MODEL}"):
            p = read_tensor_pack(value(o))
            carried = reuse_keys_of(o.headers, len(p))
            assert carried is not None
            keys.update(zip(p.record_ids, carried, strict=True))
    return keys


def completion(config: ModelConfig, record_id: str, tokens: list[int]) -> bytes:
    """A completion as the GPU worker writes it for job-a's record (and caches it under its key)."""
    outputs = (Tensor.from_array("token_ids", np.asarray(tokens, dtype=np.int64)),)
    return encode(
        InferenceResult(
            "job-a", record_id, 0, MODEL, config.version, outputs, "b", 1, {"n": "x"}, text="hi", finish_reason="stop"
        )
    )


def test_greedy_and_seeded_requests_are_reused_and_one_sampled_without_a_seed_is_computed(
    repository: Path, tmp_path: Path
) -> None:
    store = ResultStore(tmp_path)

    def open_cache(config: ModelConfig) -> CachedResults:
        return store

    reuse = ReuseLookup(open_cache)
    models = Models(repository)
    config = models(MODEL).config
    first = preprocess_texts([requests_pack("job-a", REQUESTS)], models, TOPICS, reuse=reuse)
    keys = tensors_of(first)
    assert sorted(keys) == sorted(REQUESTS) and not [o for o in first if o.topic == "ns.results"]
    assert keys["unseeded"] is None  # never reused: no key, so its result is never cached
    kept = {name: key for name, key in keys.items() if key is not None}
    assert len(set(kept.values())) == 3
    for name, key in kept.items():
        store.put(key, completion(config, name, [11, 12]))

    second = preprocess_texts([requests_pack("job-b", REQUESTS)], models, TOPICS, reuse=reuse)

    reused = {}
    for o in second:
        if o.topic == "ns.results":
            assert header_of(o.headers, REUSED_HEADER) == b"1"
            result = decode(value(o), InferenceResult)
            reused[result.record_id] = result
    assert sorted(reused) == ["chat", "greedy", "seeded"]
    for name, result in reused.items():
        assert (result.job_id, result.text, result.finish_reason) == ("job-b", "hi", "stop")
        assert result.outputs[0].to_array().tolist() == [11, 12]
        assert result.attributes == {"n": str(list(REQUESTS).index(name))}  # its own, the request mark out
        assert REUSED_STAMP in result.timestamps
    assert sorted(tensors_of(second)) == ["unseeded"]  # the only one rendered and tokenized


def test_a_request_asking_for_more_tokens_is_another_key_and_the_default_spelled_out_is_the_same(
    repository: Path, tmp_path: Path
) -> None:
    models = Models(repository)
    default = models(MODEL).config.generation.default_max_tokens  # type: ignore[union-attr]
    asked: dict[str, dict[str, Any]] = {
        "plain": {"prompt": "Once upon a time"},
        "default": {"prompt": "Once upon a time", "params": {"max_tokens": default}},
        "more": {"prompt": "Once upon a time", "params": {"max_tokens": default + 1}},
    }
    reuse = ReuseLookup(lambda config: ResultStore(tmp_path))
    keys = tensors_of(preprocess_texts([requests_pack("job-a", asked)], models, TOPICS, reuse=reuse))
    assert keys["plain"] == keys["default"] != keys["more"]
