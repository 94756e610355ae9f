"""Both generation engines (gpu_consumer/generation/: transformers' continuous batching in this
process, vLLM in its own environment through tests/support/engine_process.py) against transformers'
own `generate()` run one prompt at a time: greedy completions token-identical whatever runs beside
them, max_tokens and end-of-sequence exact, stop strings cut where they start, shared prefixes
counted, seeded sampling repeatable."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpu_consumer.engines.generation_protocol import GenerationSettings
from gpu_consumer.engines.transformers_engine import TransformersEngine
from gpu_consumer.generation.requests import Completion, GenerationRequest, SamplingParams
from model_repository.config import ModelConfig
from tests.support.engine_process import RemoteEngine, open_engine

pytestmark = pytest.mark.real_model  # a model built with transformers (seconds to load)


@pytest.fixture(scope="module")
def tiny_generator(tiny_llama_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelConfig:
    from model_import.causal_lm import import_causal_lm

    return import_causal_lm(tmp_path_factory.mktemp("generators"), tiny_llama_folder, "tiny-llama")


Engine = TransformersEngine | RemoteEngine


@pytest.fixture(scope="module", params=["transformers", "vllm"])
def engine(
    request: pytest.FixtureRequest, tiny_generator: ModelConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    limits = GenerationSettings(max_sequences=8, kv_cache_tokens=8192, page_size=32, eager=True)
    engine: Engine = open_engine(request.param, tiny_generator, limits, tmp_path_factory.mktemp("vllm") / "log")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def reference(tiny_generator: ModelConfig) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_generator.generator_path), dtype=torch.float32).eval()


def generated(model: Any, prompt: list[int], max_tokens: int, eos: list[int]) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False, eos_token_id=eos, pad_token_id=eos[0]
        )
    return [int(t) for t in out[0, len(prompt) :]]


def run_all(engine: Engine, requests: list[GenerationRequest]) -> dict[str, Completion]:
    for request in requests:
        engine.submit(request)
    done: dict[str, Completion] = {}
    for _ in range(600):
        done.update((c.key, c) for c in engine.completions(0.1))
        if len(done) == len(requests):
            return done
    raise AssertionError(f"{len(requests) - len(done)} requests did not finish")


def test_greedy_completions_match_generate_one_prompt_at_a_time(
    engine: Engine, reference: Any, tiny_generator: ModelConfig
) -> None:
    rng = random.Random(7)
    vocab = reference.config.vocab_size
    eos = list(tiny_generator.generation.eos_token_ids)  # type: ignore[union-attr]
    # 64 prompts of a few tokens to ~950 (the tiny model's context is 2,048), mixed max_tokens
    prompts = [[rng.randrange(3, vocab) for _ in range(rng.choice([3, 17, 60, 200, 950]))] for _ in range(64)]
    max_tokens = [rng.choice([1, 5, 24, 40]) for _ in prompts]
    requests = [
        GenerationRequest(f"r{i}", tuple(p), SamplingParams(max_tokens=n))
        for i, (p, n) in enumerate(zip(prompts, max_tokens, strict=True))
    ]
    done = run_all(engine, requests)
    for i, (prompt, n) in enumerate(zip(prompts, max_tokens, strict=True)):
        expected = generated(reference, prompt, n, eos)
        got = done[f"r{i}"]
        assert list(got.token_ids) == expected, f"request {i}: {len(prompt)} prompt tokens, max_tokens {n}"
        assert got.prompt_tokens == len(prompt)
        assert got.finish_reason == ("stop" if expected[-1] in eos and len(expected) <= n else "length")
        assert got.text == engine.decode(expected)


def test_a_stop_string_cuts_the_text_and_ends_the_sequence(engine: Engine, reference: Any) -> None:
    prompt = [101, 102, 103, 104, 105]
    free = run_all(engine, [GenerationRequest("free", tuple(prompt), SamplingParams(max_tokens=30))])["free"]
    text = free.text
    assert len(text) > 6, "the tiny model's greedy text is long enough to cut"
    stop = text[3:6]
    cut = text.find(stop)
    stopped = run_all(
        engine, [GenerationRequest("stopped", tuple(prompt), SamplingParams(max_tokens=30, stop=(stop,)))]
    )["stopped"]
    assert stopped.text == text[:cut]
    assert stopped.finish_reason == "stop"
    assert stopped.prompt_tokens == len(prompt)  # usage counts the prompt of a stopped sequence too
    assert list(stopped.token_ids) == list(free.token_ids[: len(stopped.token_ids)])
    assert stop in engine.decode(stopped.token_ids)
    assert stop not in engine.decode(stopped.token_ids[:-1])


def test_a_shared_prefix_is_computed_once_and_counted(engine: Engine) -> None:
    shared = tuple(range(200, 400))  # 200 tokens: six full blocks of 32
    first = run_all(engine, [GenerationRequest("p0", (*shared, 7), SamplingParams(max_tokens=2))])["p0"]
    second = run_all(engine, [GenerationRequest("p1", (*shared, 9), SamplingParams(max_tokens=2))])["p1"]
    assert first.cached_prompt_tokens == 0
    assert second.cached_prompt_tokens == 192


def test_a_seeded_sampled_request_repeats_its_text_alone_and_beside_others(engine: Engine) -> None:
    prompt = tuple(range(300, 340))
    sampled = SamplingParams(max_tokens=24, temperature=1.0, top_p=0.95, seed=11)
    alone = run_all(engine, [GenerationRequest("s0", prompt, sampled)])["s0"]
    crowd = [
        GenerationRequest(f"n{i}", tuple(range(500 + i, 560 + 2 * i)), SamplingParams(max_tokens=30)) for i in range(6)
    ]
    beside = run_all(engine, [*crowd[:3], GenerationRequest("s1", prompt, sampled), *crowd[3:]])["s1"]
    other_seed = run_all(engine, [GenerationRequest("s2", prompt, replace(sampled, seed=12))])["s2"]
    greedy = run_all(engine, [GenerationRequest("g", prompt, SamplingParams(max_tokens=24))])["g"]
    assert alone.token_ids == beside.token_ids
    assert alone.token_ids != other_seed.token_ids  # 24 draws over a 49,152-token vocabulary
    assert alone.token_ids != greedy.token_ids
    top_1 = run_all(engine, [GenerationRequest("k", prompt, replace(sampled, top_k=1))])["k"]
    assert top_1.token_ids == greedy.token_ids  # top-k 1 leaves the greedy token alone


@pytest.fixture(scope="module", params=["transformers", "vllm"])
def small_cache_engine(
    request: pytest.FixtureRequest, tiny_generator: ModelConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    """An engine whose KV cache holds 256 tokens: two of the test's requests at a time."""
    limits = GenerationSettings(max_sequences=8, kv_cache_tokens=256, page_size=32, eager=True)
    engine: Engine = open_engine(request.param, tiny_generator, limits, tmp_path_factory.mktemp("vllm") / "log")
    yield engine
    engine.close()


def test_requests_past_the_kv_cache_together_wait_or_are_preempted_and_all_finish_the_same(
    small_cache_engine: Engine, reference: Any, tiny_generator: ModelConfig
) -> None:
    """Eight requests of 60 prompt tokens and 40 generated (800 tokens of KV cache together, the
    cache 256): they wait for blocks (transformers) or are preempted and recomputed (vLLM), and
    every one ends token-identical to generate() alone."""
    assert small_cache_engine.kv_tokens == 256
    rng = random.Random(11)
    vocab = reference.config.vocab_size
    eos = list(tiny_generator.generation.eos_token_ids)  # type: ignore[union-attr]
    prompts = [[rng.randrange(3, vocab) for _ in range(60)] for _ in range(8)]
    requests = [GenerationRequest(f"kv{i}", tuple(p), SamplingParams(max_tokens=40)) for i, p in enumerate(prompts)]
    done = run_all(small_cache_engine, requests)
    for i, prompt in enumerate(prompts):
        assert list(done[f"kv{i}"].token_ids) == generated(reference, prompt, 40, eos), f"request {i}"
