"""Generation through the real stages on a real broker: requests (a chat, prompts) tokenized by
the preprocess stage's pure function, produced to tensors.<model>, and run by the GPU loop's
GenerationStep (drain mode) on the transformers engine; every result's completion is
token-identical to transformers' `generate()` run on the same prompt alone, and a request that
cannot run is a dead letter while its neighbours get results."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpu_consumer.batcher import BatchPolicy
from gpu_consumer.generation.engine import GenerationLimits
from gpu_consumer.generation.requests import Completion
from gpu_consumer.generation.transformers_engine import TransformersEngine
from gpu_consumer.steps import Inference, WorkerStats
from gpu_consumer.windows import WindowLimits
from gpu_consumer.worker import LoopOptions, run
from kafka_io.clients import make_consumer, make_producer
from kafka_io.polling import subscribe
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import KafkaSettings, Topics
from kafka_io.topics import TopicSpec, ensure_topics
from preprocess_app.models import Models
from preprocess_app.text import preprocess_texts
from schemas import DeadLetter, InferenceResult, RawText, decode, encode
from schemas.generation_request import REQUEST_ATTRIBUTE
from schemas.model_config import ModelConfig
from tests.support.causal_lm import CHAT, chat_ids

pytestmark = pytest.mark.real_model

MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def generator_repository(tiny_llama_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from model_repository.causal_lm import import_causal_lm

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
    engine: TransformersEngine,
    window: int,
    skip: Callable[[str, int | None], bool] = lambda job_id, submission: False,
) -> WorkerStats:
    """The GPU loop with the generation step, in drain mode, over tensors.<MODEL>; the engine closed after."""
    consumer = make_consumer(settings, topics.gpu_group(MODEL))
    try:
        return run(
            consumer,
            subscribe(consumer, [topics.tensors(MODEL)]),
            lambda: make_producer(settings),
            Inference(None, config, topics, BatchPolicy(1), "g", skip),
            WindowLimits(window, 20.0),
            LoopOptions(drain=True, generator=engine),
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


def test_requests_become_completions_identical_to_generate(
    settings: KafkaSettings, topics: Topics, generator_repository: Path, smollm2_tokenizer: Any
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
    requests.append({"prompt": "too long", "params": {"max_tokens": 5000}})  # past the 1,024-token context
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

    engine = TransformersEngine(config, GenerationLimits(max_sequences=4, kv_cache_tokens=4096, page_size=32))
    engine.warmup()
    stats = drain(settings, topics, config, engine, 8)
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
    engine = TransformersEngine(config, GenerationLimits(max_sequences=64, kv_cache_tokens=32768, page_size=32))
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
    engine = TransformersEngine(config, GenerationLimits(max_sequences=8, kv_cache_tokens=65536, page_size=64))
    engine.warmup()
    finished: list[str] = []
    completions = engine.completions

    def counted(timeout_s: float) -> list[Completion]:
        done = completions(timeout_s)
        finished.extend(c.key for c in done)
        return done

    engine.completions = counted  # type: ignore[method-assign]

    def cancelled(job_id: str, submission: int | None) -> bool:
        """The job is cancelled once its two short requests have finished (the rest decode on)."""
        return job_id == "job-x" and len(finished) >= 2

    stats = drain(settings, topics, config, engine, 64, cancelled)
    results = [decode(m.value, InferenceResult) for m in read_topics(settings, [topics.results])]
    assert sorted(r.record_id for r in results) == ["r0", "r1"]  # what finished before the cancel is kept
    assert stats.records == len(requests)  # the cancelled ones are consumed and committed, never run
