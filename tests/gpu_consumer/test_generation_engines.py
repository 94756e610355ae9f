"""Which generation engine a worker runs, and what the vLLM engine asks of vLLM (pure: no vLLM
needed; the engines themselves are run in test_generation_engine.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_consumer.engines.factory import make_engine
from gpu_consumer.engines.generation_factory import generator_kind
from gpu_consumer.engines.generation_protocol import GenerationSettings
from gpu_consumer.engines.protocol import EngineLoadError
from gpu_consumer.engines.vllm_engine import engine_args, kv_bytes_per_token, vllm_sampling
from gpu_consumer.generation.requests import SamplingParams
from tests.support.causal_lm import lm_config

CONFIG = lm_config(eos_token_ids=(2, 0), context_length=2048)
# SmolLM2-135M's shape: 30 layers, 3 KV heads of 64
SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}


@pytest.mark.parametrize("kind", ["tensorrt", "torch", "onnxruntime"])
def test_an_encoder_engine_is_refused_for_a_causal_lm_naming_those_that_run_it(kind: str) -> None:
    with pytest.raises(
        EngineLoadError, match=f"--engine {kind} runs encoders; a causal LM runs on auto, vllm, transformers"
    ):
        generator_kind(kind)


@pytest.mark.parametrize("kind", ["vllm", "transformers"])
def test_a_generation_engine_is_refused_for_an_encoder(kind: str) -> None:
    encoder = replace(CONFIG, task="text-embedding", generation=None)
    with pytest.raises(EngineLoadError, match=f"--engine {kind} runs causal LMs; lm runs on auto, tensorrt"):
        make_engine(encoder, kind)


def test_named_generation_engines_are_taken_as_named() -> None:
    assert generator_kind("transformers") == "transformers"
    assert generator_kind("vllm") == "vllm"  # made even where vLLM is missing: its load error says so


def test_the_kv_cache_is_sized_in_bytes_from_the_model_s_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    # keys and values, 30 layers, 3 heads of 576 / 9 = 64, 4 bytes (float32): 46,080 bytes a token
    assert kv_bytes_per_token(tmp_path, 4) == 46_080
    (tmp_path / "config.json").write_text(json.dumps({**SMOLLM2, "head_dim": 128}))
    assert kv_bytes_per_token(tmp_path, 2) == 2 * 30 * 3 * 128 * 2


def test_a_config_that_cannot_size_the_cache_is_a_load_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    with pytest.raises(EngineLoadError, match=r"config\.json: cannot size the KV cache"):
        kv_bytes_per_token(tmp_path, 4)


def test_vllm_is_held_to_our_limits(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(SMOLLM2))
    config = replace(CONFIG, directory=tmp_path)
    limits = GenerationSettings(max_sequences=32, kv_cache_tokens=1000, page_size=64, step_tokens=512, eager=True)
    args = engine_args(config, limits, "cpu")
    # 1,000 tokens in blocks of 64, rounded up, and the block vLLM keeps back
    assert args["num_gpu_blocks_override"] == 17
    assert args["kv_cache_memory_bytes"] == 17 * 64 * 46_080
    assert args["block_size"] == 64 and args["max_num_seqs"] == 32 and args["max_num_batched_tokens"] == 512
    assert args["max_model_len"] == 16 * 64  # a sequence fits in the cache, not the whole context
    assert args["dtype"] == "float32" and args["enforce_eager"] is True
    assert args["skip_tokenizer_init"] is True  # token ids in and out: the text is ours
    cuda = engine_args(config, replace(limits, prefix_sharing=False), "cuda")
    assert cuda["dtype"] == "bfloat16" and cuda["kv_cache_memory_bytes"] == 17 * 64 * 23_040
    assert cuda["enable_prefix_caching"] is False
    roomy = engine_args(config, replace(limits, kv_cache_tokens=65536), "cpu")
    assert roomy["max_model_len"] == 2048  # the model's context, where the cache holds more


def test_a_request_s_sampling_maps_onto_vllm_with_end_of_sequence_ids_as_stop_tokens() -> None:
    greedy = vllm_sampling(SamplingParams(max_tokens=7), frozenset({2, 0}))
    assert greedy == {
        "max_tokens": 7,
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": 0,
        "seed": None,
        "stop_token_ids": [0, 2],
        "detokenize": False,
        "streamed": False,
    }
    sampled = vllm_sampling(
        SamplingParams(max_tokens=3, temperature=0.7, top_p=0.9, top_k=40, seed=5, stop=("\n",)), frozenset({2})
    )
    assert sampled["seed"] == 5 and sampled["top_k"] == 40 and sampled["temperature"] == 0.7
    assert sampled["streamed"] is True  # stop strings are matched by nearline, on each step's tokens
