"""Generation through the real stages on a real broker: requests (a chat, prompts) tokenized by
the preprocess stage's pure function, produced to tensors.<model>, and run by the GPU loop's
GenerationStep (drain mode) on the transformers engine (the first test on vLLM too); every
result's completion is token-identical to transformers' `generate()` run on the same prompt
alone, and a request that cannot run is a dead letter while its neighbours get results."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import REGISTRY

from gpu_consumer.batcher import BatchSettings
from gpu_consumer.engines.generation_protocol import GenerationEngine, GenerationFailedError, GenerationSettings
from gpu_consumer.engines.transformers_engine import TransformersEngine
from gpu_consumer.generation.requests import Completion, GenerationRequest
from gpu_consumer.generation.step import Engines
from gpu_consumer.metrics import GpuMetrics, PrometheusGpuMetrics
from gpu_consumer.steps import Inference, WorkerStats
from gpu_consumer.windows import WindowSettings
from gpu_consumer.worker import LoopSettings, run
from kafka_io.clients import make_consumer, make_producer
from kafka_io.polling import subscribe
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import Topics
from model_repository.config import ModelConfig
from preprocess_app.models import Models
from preprocess_app.text import preprocess_texts
from schemas import DeadLetter, InferenceResult, RawText, Tensor, TensorRecord, decode, encode
from schemas.generation_request import REQUEST_ATTRIBUTE
from tests.support.causal_lm import CHAT, chat_ids
from tests.support.engine_process import open_engine

pytestmark = pytest.mark.real_model

MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def generator_repository(tiny_llama_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from model_import.causal_lm import import_causal_lm

    return import_causal_lm(tmp_path_factory.mktemp("generators"), tiny_llama_folder, MODEL).directory.parents[1]


def reference_completion(folder: Path, prompt: list[int], max_tokens: int, eos: list[int]) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False, eos_token_id=eos, pad_token_id=eos[0]
        )
    return [int(t) for t in out[0, len(prompt) :]]


def drain(
    settings: KafkaSettings,
    topics: Topics,
    config: ModelConfig,
    engine: GenerationEngine,
    window: int,
    skip: Callable[[str, int | None], bool] = lambda job_id, submission: False,
    new_engine: Callable[[], GenerationEngine] | None = None,
    metrics: GpuMetrics | None = None,
) -> WorkerStats:
    """The GPU loop with the generation step, in drain mode, over tensors.<MODEL>; the engine closed after."""
    consumer = make_consumer(settings, topics.gpu_group(MODEL))
    try:
        return run(
            consumer,
            subscribe(consumer, [topics.tensors(MODEL)]),
            lambda: make_producer(settings),
            Inference(None, config, topics, BatchSettings(1), "g", skip),
            WindowSettings(window, 20.0),
            LoopSettings(drain=True, generation=Engines(engine, new_engine), metrics=metrics),
        )
    finally:
        consumer.close()
        engine.close()


def feed_without_eos(
    settings: KafkaSettings, topics: Topics, repository: Path, job_id: str, requests: list[dict[str, Any]]
) -> ModelConfig:
    """The requests preprocessed (one submission, so one pack in order) onto tensors.<MODEL>; the
    model's config with no end-of-sequence id, so each request decodes exactly its max_tokens."""
    models = Models(repository)
    loaded = models(MODEL)
    assert loaded.config.generation is not None
    marked = {REQUEST_ATTRIBUTE: "true"}
    raw = [
        ConsumedRecord(topics.raw_text, 0, i, encode(RawText(job_id, f"r{i}", i, MODEL, json.dumps(r), 1_000, marked)))
        for i, r in enumerate(requests)
    ]
    tensors = topics.tensors(MODEL)
    out = preprocess_texts(raw, models, topics)
    ensure_topics(settings, [TopicSpec(tensors), TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    produce_all(make_producer(settings), [o for o in out if o.topic == tensors])
    return replace(loaded.config, generation=replace(loaded.config.generation, eos_token_ids=()))


@pytest.mark.parametrize("kind", ["transformers", "vllm"])
def test_requests_become_completions_identical_to_generate(
    kind: str,
    settings: KafkaSettings,
    topics: Topics,
    generator_repository: Path,
    smollm2_tokenizer: Any,
    tmp_path: Path,
) -> None:
    models = Models(generator_repository)
    config: ModelConfig = models(MODEL).config
    assert config.generation is not None
    rng = random.Random(3)
    words = ["river", "Danube", "stone", "light", "north", "quiet", "sea", "tower"]
    prompts = [" ".join(rng.choice(words) for _ in range(rng.randrange(1, 40))) for _ in range(11)]
    requests = [{"messages": CHAT, "params": {"max_tokens": 12}}] + [
        {"prompt": p, "params": {"max_tokens": rng.choice([1, 6, 20])}} for p in prompts
    ]
    requests.append({"prompt": "too long", "params": {"max_tokens": 5000}})  # past the 2,048-token context
    marked = {REQUEST_ATTRIBUTE: "true"}
    raw = [
        ConsumedRecord(
            topics.raw_text, 0, i, encode(RawText("job-g", f"r{i}", i, MODEL, json.dumps(r), 1_000 + i, marked))
        )
        for i, r in enumerate(requests)
    ]
    # a plain text (no request mark) is a prompt with the model's default max_tokens
    plain = prompts[0]
    raw.append(ConsumedRecord(topics.raw_text, 0, len(raw), encode(RawText("job-g", "plain", 99, MODEL, plain, 1))))
    out = preprocess_texts(raw, models, topics)
    dead = [o for o in out if o.topic == topics.dead_letters]
    assert [decode(d.value, DeadLetter).record_id for d in dead if d.value] == [f"r{len(requests) - 1}"]
    tensors = topics.tensors(MODEL)
    ensure_topics(settings, [TopicSpec(tensors), TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    producer = make_producer(settings)
    produce_all(producer, [OutRecord(o.topic, o.value, o.key, o.headers) for o in out if o.topic == tensors])

    limits = GenerationSettings(max_sequences=4, kv_cache_tokens=4096, page_size=32, eager=True)
    engine: GenerationEngine = open_engine(kind, config, limits, tmp_path / "vllm.log")
    series = f"{MODEL}-{uuid.uuid4().hex[:8]}"  # its own series in the process-wide registry
    metrics = PrometheusGpuMetrics(series)
    stats = drain(settings, topics, config, engine, 8, metrics=metrics)
    assert stats.records == len(requests)  # every request but the refused one, and the plain text

    results = {
        r.record_id: r for r in (decode(m.value, InferenceResult) for m in read_topics(settings, [topics.results]))
    }
    assert sorted(results) == sorted([*(f"r{i}" for i in range(len(requests) - 1)), "plain"])
    eos = list(config.generation.eos_token_ids)
    inputs = [chat_ids(smollm2_tokenizer)] + [list(smollm2_tokenizer(p)["input_ids"]) for p in prompts]
    for i, (prompt, request) in enumerate(zip(inputs, requests, strict=False)):
        max_tokens = request["params"]["max_tokens"]  # type: ignore[index]
        expected = reference_completion(config.generator_path, prompt, max_tokens, eos)
        got = results[f"r{i}"]
        assert got.outputs[0].to_array().tolist() == expected, f"r{i}"
        assert got.text == smollm2_tokenizer.decode(expected, skip_special_tokens=True)
        assert got.length == len(prompt)
        assert got.completion_tokens == len(expected)
        assert got.finish_reason == ("stop" if expected[-1] in eos else "length")
        assert got.attributes == {}  # the request mark and the sampling parameters stay internal
    sample = REGISTRY.get_sample_value
    labels = {"model": series}
    assert sample("nearline_generated_tokens_total", labels) == sum(r.completion_tokens for r in results.values())
    reasons = [r.finish_reason for r in results.values()]
    for reason in ("stop", "length"):
        assert (sample("nearline_completions_total", {**labels, "finish_reason": reason}) or 0) == reasons.count(reason)
    assert (sample("nearline_engine_busy_seconds_total", labels) or 0) > 0
    default = config.generation.default_max_tokens
    assert results["plain"].outputs[0].to_array().tolist() == reference_completion(
        config.generator_path, inputs[1], default, eos
    )


def test_short_requests_finish_and_are_stored_while_a_long_one_still_decodes(
    settings: KafkaSettings, topics: Topics, generator_repository: Path
) -> None:
    """Continuous batching: one 512-token request and 200 of 16 tokens submitted together; every
    short one's result is produced before the long one's (no end-of-sequence id here, so each
    request decodes exactly its max_tokens)."""
    requests = [{"prompt": "Tell me a long story.", "params": {"max_tokens": 512}}] + [
        {"prompt": f"Short answer number {i}.", "params": {"max_tokens": 16}} for i in range(200)
    ]
    config = feed_without_eos(settings, topics, generator_repository, "job-c", requests)
    engine = TransformersEngine(config, GenerationSettings(max_sequences=64, kv_cache_tokens=32768, page_size=32))
    engine.warmup()
    drain(settings, topics, config, engine, 256)
    produced = {
        r.record_id: (r.timestamps["result_produced"], r.completion_tokens)
        for r in (decode(m.value, InferenceResult) for m in read_topics(settings, [topics.results]))
    }
    assert len(produced) == len(requests)
    long_at, long_tokens = produced.pop("r0")
    assert long_tokens == 512
    assert all(tokens == 16 for _, tokens in produced.values())
    assert max(at for at, _ in produced.values()) < long_at


def test_a_cancelled_job_s_sequences_stop_at_the_next_step_and_its_records_are_committed(
    settings: KafkaSettings, topics: Topics, generator_repository: Path
) -> None:
    """Cancel mid-generation: what finished is kept, the sequences still decoding stop without a
    result (no end-of-sequence id here: each would run its 800 tokens), and every record's offset
    is committed."""
    requests = [{"prompt": "Go on.", "params": {"max_tokens": 4 if i < 2 else 800}} for i in range(40)]
    config = feed_without_eos(settings, topics, generator_repository, "job-x", requests)
    engine = TransformersEngine(config, GenerationSettings(max_sequences=8, kv_cache_tokens=65536, page_size=64))
    engine.warmup()
    finished: list[str] = []
    returned: list[str] = []
    completions = engine.completions

    def counted(timeout_s: float) -> list[Completion]:
        # the emit thread asks again only once it has produced what the last call returned: a
        # completion counts as finished then, not while a cancel could still drop it unproduced
        finished.extend(returned)
        done = completions(timeout_s)
        returned[:] = [c.key for c in done]
        return done

    engine.completions = counted  # type: ignore[method-assign]

    def cancelled(job_id: str, submission: int | None) -> bool:
        """The job is cancelled once its two short requests have finished (the rest decode on)."""
        return job_id == "job-x" and len(finished) >= 2

    stats = drain(settings, topics, config, engine, 64, cancelled)
    results = [decode(m.value, InferenceResult) for m in read_topics(settings, [topics.results])]
    assert sorted(r.record_id for r in results) == ["r0", "r1"]  # what finished before the cancel is kept
    assert stats.records == len(requests)  # the cancelled ones are consumed and committed, never run


class FragileEngine:
    """The transformers engine, broken by one prompt as a kernel can be by one input: once given
    `poison`, it fails every sequence in flight with an error (as transformers does when its step
    raises), then stops (every later call raises)."""

    def __init__(self, inner: TransformersEngine, poison: list[int]) -> None:
        self.inner, self.poison = inner, poison
        self.name, self.max_sequences, self.kv_tokens = inner.name, inner.max_sequences, inner.kv_tokens
        self.busy_s = 0.0
        self.broken = False
        self.stopped = False
        self.keys: list[str] = []

    def warmup(self) -> None:
        self.inner.warmup()

    def submit(self, request: GenerationRequest) -> None:
        if self.stopped:
            raise GenerationFailedError("the engine has stopped")
        self.keys.append(request.key)
        self.broken = self.broken or list(request.prompt) == self.poison
        self.inner.submit(request)

    def cancel(self, key: str) -> None:
        self.inner.cancel(key)

    def completions(self, timeout_s: float) -> list[Completion]:
        if self.stopped:
            raise GenerationFailedError("the engine has stopped: RuntimeError('kernel failed')")
        if self.broken:
            self.stopped = True
            return [Completion(key, (), "", "", 0, error="kernel failed") for key in self.keys]
        done = self.inner.completions(timeout_s)
        for completion in done:
            self.keys.remove(completion.key)
        return done

    def close(self) -> None:
        self.inner.close()


def test_a_prompt_that_breaks_the_engine_is_a_dead_letter_and_its_neighbours_get_their_results(
    settings: KafkaSettings, topics: Topics, generator_repository: Path, smollm2_tokenizer: Any
) -> None:
    """No crash loop: the engine fails every sequence beside the poison prompt and stops; the
    worker makes a new engine, runs each prompt that was in flight alone, dead-letters the one
    that fails alone and gives the others their results (token-identical to generate()), and
    commits every record."""
    prompts = [f"Question {i}: where does the river run?" for i in range(11)]
    prompts.insert(5, "Kaboom")
    poison = list(smollm2_tokenizer("Kaboom")["input_ids"])
    requests = [{"prompt": p, "params": {"max_tokens": 6}} for p in prompts]
    models = Models(generator_repository)
    config: ModelConfig = models(MODEL).config
    feed_without_eos(settings, topics, generator_repository, "job-p", requests)  # packed in order
    limits = GenerationSettings(max_sequences=4, kv_cache_tokens=4096, page_size=32)
    made: list[FragileEngine] = []

    def new_engine() -> FragileEngine:
        made.append(FragileEngine(TransformersEngine(config, limits), poison))
        return made[-1]

    first = new_engine()
    first.warmup()
    stats = drain(settings, topics, config, first, 8, new_engine=new_engine)
    for engine in made[1:]:
        engine.close()  # the step closes the last one it made; closing twice is harmless
    assert stats.records == len(requests)  # every offset committed: nothing left to crash on again
    results = {
        r.record_id: r for r in (decode(m.value, InferenceResult) for m in read_topics(settings, [topics.results]))
    }
    dead = [decode(m.value, DeadLetter) for m in read_topics(settings, [topics.dead_letters]) if m.value]
    assert [d.record_id for d in dead] == ["r5"]
    assert "the generation engine failed on this prompt alone" in dead[0].error
    assert sorted(results) == sorted(f"r{i}" for i in range(len(requests)) if i != 5)
    eos = list(config.generation.eos_token_ids)  # type: ignore[union-attr]
    for i, prompt in enumerate(prompts):
        if i != 5:
            expected = reference_completion(config.generator_path, list(smollm2_tokenizer(prompt)["input_ids"]), 6, eos)
            assert results[f"r{i}"].outputs[0].to_array().tolist() == expected, f"r{i}"
    assert len(made) >= 3  # the first, the one that ran the suspects alone, and one after the poison broke it


def test_a_token_id_outside_the_vocabulary_is_a_dead_letter_before_the_engine_sees_it(
    settings: KafkaSettings, topics: Topics, generator_repository: Path
) -> None:
    """A tensors record from another writer holding an id the model has no embedding for would fail
    every sequence beside it (transformers' embedding raises for the whole step): refused when the
    record is decoded (gpu_consumer/vocabulary.py), as for the encoders."""
    requests = [{"prompt": f"Prompt {i}", "params": {"max_tokens": 3}} for i in range(3)]
    config = feed_without_eos(settings, topics, generator_repository, "job-v", requests)
    engine = TransformersEngine(config, GenerationSettings(max_sequences=4, kv_cache_tokens=4096, page_size=32))
    engine.warmup()
    outside = 49_152 + 7  # SmolLM2's tokenizer: 49,152 ids
    ids = np.asarray([1, 504, outside, 282], dtype=np.int64)
    foreign = TensorRecord(
        "job-v", "foreign", 3, MODEL, "1", (Tensor.from_array("input_ids", ids),), {}, {"submitted": 1}
    )
    produce_all(make_producer(settings), [OutRecord(topics.tensors(MODEL), encode(foreign), b"job-v", [])])
    stats = drain(settings, topics, config, engine, 8)
    assert stats.records == 4
    dead = [decode(m.value, DeadLetter) for m in read_topics(settings, [topics.dead_letters]) if m.value]
    assert [d.record_id for d in dead] == ["foreign"]
    assert f"input_ids: token id {outside} is outside the model's vocabulary (0 to 49151)" in dead[0].error
    assert sorted(decode(m.value, InferenceResult).record_id for m in read_topics(settings, [topics.results])) == [
        "r0",
        "r1",
        "r2",
    ]


def test_a_request_the_kv_cache_cannot_hold_is_a_dead_letter_not_a_stuck_job(
    settings: KafkaSettings, topics: Topics, generator_repository: Path
) -> None:
    """A prompt and max_tokens within the model's context but past this worker's --kv-cache-tokens
    would wait for blocks forever, holding its partition's offsets: refused with both figures."""
    requests = [
        {"prompt": "Short one.", "params": {"max_tokens": 8}},
        {"prompt": "Long one.", "params": {"max_tokens": 300}},
    ]
    config = feed_without_eos(settings, topics, generator_repository, "job-k", requests)
    engine = TransformersEngine(config, GenerationSettings(max_sequences=4, kv_cache_tokens=256, page_size=32))
    engine.warmup()
    stats = drain(settings, topics, config, engine, 8)
    assert stats.records == 2
    dead = [decode(m.value, DeadLetter) for m in read_topics(settings, [topics.dead_letters]) if m.value]
    assert [d.record_id for d in dead] == ["r1"]
    assert "and max_tokens 300 need" in dead[0].error and "this worker's holds 256 (--kv-cache-tokens)" in dead[0].error
    results = [decode(m.value, InferenceResult) for m in read_topics(settings, [topics.results])]
    assert [(r.record_id, r.completion_tokens) for r in results] == [("r0", 8)]
