"""The GPU worker writes the results cache (gpu_consumer/cache_writes.py) on the real broker: a
result of a record with a reuse key also goes to cache.<model> under the cache key of that key and
the worker's engine, its value the very bytes of the results topic; a record without a key, and a
dead letter, put nothing there. As it starts, the worker names its engine there."""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import uuid
from types import SimpleNamespace

import numpy as np
import pytest

from bench.feed_engines import TimedEngine
from gpu_consumer.batcher import BatchSettings
from gpu_consumer.cache_writes import CacheWrites, announce_runtime, runtime_of
from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
from gpu_consumer.generation.requests import Completion, GenerationRequest
from gpu_consumer.generation.step import Engines
from gpu_consumer.steps import Inference
from gpu_consumer.windows import WindowSettings
from gpu_consumer.worker import LoopSettings, run
from kafka_io.clients import make_consumer, make_producer
from kafka_io.polling import subscribe
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import NO_REUSE_KEY, REUSE_KEYS_HEADER, OutRecord, reuse_keys_of, with_reuse_keys
from kafka_io.result_cache import cache_topic
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import Topics
from schemas import DeadLetter, InferenceResult, Tensor, TensorRecord, decode, encode
from schemas.packs import PackHead, tensor_pack_bytes
from tests.support.cache_keys import ONNX_CPU, cache_key
from tests.support.causal_lm import lm_config
from tests.support.pipeline import new_producers
from tests.support.tiny_model import VOCAB, TinyModel

JOB = "job-cache"


def key_of(record_id: str) -> bytes:
    return hashlib.blake2b(record_id.encode(), digest_size=32).digest()


def attributes_of(record_id: str) -> dict[str, str]:
    return {"source": json.dumps(f"doc {record_id}")}


def headers_of(*keys: bytes) -> list[tuple[str, bytes]]:
    """A job's headers, and the records' reuse keys where the preprocess worker would have set them."""
    return [("job_id", JOB.encode())] + ([(REUSE_KEYS_HEADER, b"".join(keys))] if keys else [])


def feed(settings: KafkaSettings, topics: Topics) -> tuple[set[str], set[str]]:
    """Single records and a pack onto tensors.tiny, every other record with a reuse key, and in each
    a keyed record that is poison (a token id past the vocabulary; an empty record of the pack):
    (the keyed records that get a result, the poisoned ones)."""
    tensors = topics.tensors("tiny")
    ensure_topics(
        settings,
        [
            TopicSpec(tensors),
            TopicSpec(topics.results),
            TopicSpec(topics.dead_letters),
            cache_topic(topics, "tiny"),
        ],
    )
    records, keyed = [], set()
    for i in range(7):
        rid, poison = f"s{i}", i == 6
        if i % 2 == 0 and not poison:
            keyed.add(rid)
        ids = np.array([101, VOCAB + 5 if poison else 2000 + i, 102], dtype=np.int64)
        tensor = Tensor.from_array("input_ids", ids)
        value = encode(TensorRecord(JOB, rid, i, "tiny", "1", (tensor,), attributes_of(rid), {"submitted": 1}))
        keys = [key_of(rid)] if i % 2 == 0 else []
        records.append(OutRecord(tensors, value, f"{JOB}/{rid}".encode(), headers_of(*keys)))
    rids = [f"p{i}" for i in range(7)]
    arrays = [np.array([101, 3000 + i, 102] if i < 6 else [], dtype=np.int64) for i in range(7)]
    keyed |= set(rids[:6])  # a pack's records all have keys, or none has
    head = PackHead(JOB, "tiny", "1", "input_ids", {"submitted": 1})
    pack = tensor_pack_bytes(head, rids, list(range(7, 14)), arrays, [attributes_of(rid) for rid in rids])
    headers = [*headers_of(*(key_of(rid) for rid in rids)), ("records", b"7")]
    records.append(OutRecord(tensors, pack, f"{JOB}/pack".encode(), headers))
    produce_all(make_producer(settings), records)
    return keyed, {"s6", "p6"}


def drain(settings: KafkaSettings, topics: Topics, tiny: TinyModel, transactional: bool) -> int:
    name = uuid.uuid4().hex[:8]
    consumer = make_consumer(settings, topics.gpu_group("tiny"))
    new_producer = new_producers(settings, f"{topics.gpu_group('tiny')}.{name}" if transactional else None)
    try:
        stats = run(
            consumer,
            subscribe(consumer, [topics.tensors("tiny")]),
            new_producer,
            Inference(OnnxRuntimeEngine(tiny.config, threads=1), tiny.config, topics, BatchSettings(4), name),
            WindowSettings(8, 20.0),
            LoopSettings(drain=True, transactional=transactional),
        )
    finally:
        consumer.close()
    return stats.records


@pytest.mark.parametrize("transactional", [False, True], ids=["pipelined", "exactly-once"])
def test_results_of_keyed_records_are_cached_under_their_keys_as_the_bytes_of_the_results_topic(
    settings: KafkaSettings, topics: Topics, tiny: TinyModel, transactional: bool
) -> None:
    keyed, poisoned = feed(settings, topics)
    assert drain(settings, topics, tiny, transactional) == 14

    results: dict[str, bytes] = {}
    for msg in read_topics(settings, [topics.results]):
        results[decode(msg.value, InferenceResult).record_id] = msg.value
    dead = {decode(msg.value, DeadLetter).record_id for msg in read_topics(settings, [topics.dead_letters])}
    assert set(results) == {f"s{i}" for i in range(6)} | {f"p{i}" for i in range(6)}  # results as before
    assert dead == poisoned
    cached = [(msg.key, msg.value) for msg in read_topics(settings, [topics.cache("tiny")])]
    if transactional:  # in the transaction, a cache topic refusing writes would stall the worker
        assert cached == []
        return
    # exactly the keyed records' results, each once, byte for byte; none of a record without a key
    # or of a poisoned one (whose key is never written)
    assert sorted(cached) == sorted((cache_key(key_of(rid), ONNX_CPU), results[rid]) for rid in keyed)
    assert len(keyed) == 9
    assert not {cache_key(key_of(rid), ONNX_CPU) for rid in poisoned} & {key for key, _ in cached}


class EchoEngine:
    """A generation engine that completes a prompt with its own ids reversed, at once, and refuses
    a prompt holding the id 666 (its own fault: a dead letter)."""

    name, max_sequences, busy_s, kv_tokens = "echo", 8, 0.0, 4096

    def __init__(self) -> None:
        self._done: queue.Queue[Completion] = queue.Queue()

    def warmup(self) -> None:
        pass

    def submit(self, request: GenerationRequest) -> None:
        prompt = request.prompt
        if 666 in prompt:
            self._done.put(Completion(request.key, (), "", "", len(prompt), error="refused", refused=True))
        else:
            self._done.put(Completion(request.key, prompt[::-1], "echo", "length", len(prompt)))

    def cancel(self, key: str) -> None:
        pass

    def completions(self, timeout_s: float) -> list[Completion]:
        try:
            done = [self._done.get(timeout=timeout_s)]
        except queue.Empty:
            return []
        while not self._done.empty():
            done.append(self._done.get_nowait())
        return done

    def close(self) -> None:
        pass


def test_a_generation_s_result_is_cached_as_its_bytes_in_the_results_topic_and_a_refused_prompt_is_not(
    settings: KafkaSettings, topics: Topics
) -> None:
    config = lm_config()
    tensors = topics.tensors(config.name)
    ensure_topics(
        settings,
        [TopicSpec(tensors), TopicSpec(topics.results), TopicSpec(topics.dead_letters), cache_topic(topics, "lm")],
    )
    records = []
    for i in range(6):  # g0, g2 keyed; g4 keyed and refused; the odd ones without a key
        rid = f"g{i}"
        prompt = np.array([1, 666 if i == 4 else 10 + i, 2], dtype=np.int64)
        tensor = Tensor.from_array("input_ids", prompt)
        value = encode(TensorRecord(JOB, rid, i, "lm", "1", (tensor,), attributes_of(rid), {"submitted": 1}))
        keys = [key_of(rid)] if i % 2 == 0 else []
        records.append(OutRecord(tensors, value, f"{JOB}/{rid}".encode(), headers_of(*keys)))
    produce_all(make_producer(settings), records)
    consumer = make_consumer(settings, topics.gpu_group("lm"))
    try:
        stats = run(
            consumer,
            subscribe(consumer, [tensors]),
            lambda: make_producer(settings),
            Inference(None, config, topics, BatchSettings(1), "g"),
            WindowSettings(4, 20.0),
            LoopSettings(drain=True, generation=Engines(EchoEngine())),
        )
    finally:
        consumer.close()
    assert stats.records == 6

    results = {decode(m.value, InferenceResult).record_id: m.value for m in read_topics(settings, [topics.results])}
    dead = {decode(m.value, DeadLetter).record_id for m in read_topics(settings, [topics.dead_letters])}
    assert set(results) == {"g0", "g1", "g2", "g3", "g5"} and dead == {"g4"}
    cached = sorted((m.key, m.value) for m in read_topics(settings, [topics.cache("lm")]))
    assert cached == sorted((cache_key(key_of(rid), "echo"), results[rid]) for rid in ("g0", "g2"))


def test_reuse_keys_are_read_only_where_there_are_32_bytes_for_each_record() -> None:
    keys = [bytes([n]) * 32 for n in range(1, 4)]
    assert reuse_keys_of(headers_of(*keys), 3) == keys
    # a record without a key (a sampled request without a seed) holds its place with zeros
    assert reuse_keys_of(headers_of(keys[0], NO_REUSE_KEY, keys[2]), 3) == [keys[0], None, keys[2]]
    carried = with_reuse_keys(OutRecord("ns.tensors.tiny", b"pack", b"job/r0"), [keys[0], None, keys[2]])
    assert reuse_keys_of(carried.headers, 3) == [keys[0], None, keys[2]]
    assert reuse_keys_of(headers_of(*keys), 2) is None  # a header of another length: written by something else
    assert reuse_keys_of(headers_of(b"short"), 1) is None
    assert reuse_keys_of(headers_of(), 1) is None
    assert reuse_keys_of([(REUSE_KEYS_HEADER, None)], 1) is None


def test_a_result_too_large_for_the_broker_is_a_dead_letter_and_is_not_cached() -> None:
    topics = Topics("ns")
    writes = CacheWrites(topics, "tiny", "echo")
    key = bytes.fromhex("cd" * 32)
    result = OutRecord(topics.results, b"result", b"job/r0")
    dead_letter = OutRecord(topics.dead_letters, b"dead", b"job/r0")
    assert writes.one(key, result) == OutRecord(topics.cache("tiny"), b"result", cache_key(key, "echo"))
    assert writes.one(key, dead_letter) is None
    assert writes.one(None, result) is None


def test_a_cache_write_that_fails_is_logged_once_per_cause(caplog: pytest.LogCaptureFixture) -> None:
    writes = CacheWrites(Topics("ns"), "tiny", "echo")
    with caplog.at_level(logging.WARNING, logger="gpu_consumer.cache_writes"):
        for _ in range(3):
            writes.failed("delivery to ns.cache.tiny failed: Broker: Message size too large")
        writes.failed("delivery to ns.cache.tiny failed: Broker: Unknown topic or partition")
    assert len(caplog.records) == 2


def test_the_runtime_names_the_engine_where_it_runs_and_its_precision(tiny: TinyModel) -> None:
    assert runtime_of(OnnxRuntimeEngine(tiny.config, threads=1)) == ONNX_CPU
    torch_on_gpu = SimpleNamespace(name="torch", device=SimpleNamespace(type="cuda", index=0), precision="fp16")
    assert runtime_of(torch_on_gpu) == "torch/cuda/fp16"
    assert (
        runtime_of(SimpleNamespace(name="transformers", device="cpu", precision="float32"))
        == "transformers/cpu/float32"
    )
    assert runtime_of(TimedEngine(OnnxRuntimeEngine(tiny.config, threads=1), "timed")) == ONNX_CPU  # bench's wrapper
    assert runtime_of(EchoEngine()) == "echo"


def test_a_starting_worker_names_its_engine_in_the_cache_under_one_key(settings: KafkaSettings, topics: Topics) -> None:
    ensure_topics(settings, [cache_topic(topics, "tiny")])
    announce_runtime(settings, topics, "tiny", "torch/cuda/fp16")
    announce_runtime(settings, topics, "tiny", ONNX_CPU)  # another worker, started later
    named = [(m.key, m.value) for m in read_topics(settings, [topics.cache("tiny")])]
    assert named == [(b"runtime", b"torch/cuda/fp16"), (b"runtime", ONNX_CPU.encode())]
