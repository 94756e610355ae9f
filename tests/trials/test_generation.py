"""Generation end to end on Apache Kafka with the shipped SmolLM2-135M and a seeded tiny Llama,
each on each engine (transformers' continuous batching, and vLLM with the GPU worker in its own
environment): 64 requests of mixed lengths (a few tokens to about 1,000) and mixed max_tokens,
packed 5 to a pack, through the real preprocess and GPU worker processes, SmolLM2's GPU worker
SIGKILLed twice mid-job. Every record ends with exactly one result in `nearline results`, and
every copy of a result in the topic (a killed worker's window is generated again) is
token-identical to transformers' `generate()` run directly on that prompt alone."""

from __future__ import annotations

import functools
import json
import random
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_io.reading import read_topics
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from model_repository.config import ModelConfig
from model_repository.folders import load_model_config
from schemas import InferenceResult, decode
from tests.support.engine_process import vllm_python
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline, finish_and_check, follow_until, submit
from tests.support.shared import made_once

MODEL = "smollm2-135m"
RNG = random.Random(20261206)


def requests() -> list[dict[str, Any]]:
    """64 requests over the Python docs' paragraphs: chats and prompts, a few words to ~1,000 tokens."""
    lines = [row["text"] for row in example_lines(400)]
    out: list[dict[str, Any]] = []
    for i in range(64):
        span = RNG.choice([1, 1, 1, 2, 4, 12, 30]) if i % 16 else 40  # four prompts of ~1,000 tokens
        start = RNG.randrange(0, len(lines) - span)
        text = " ".join(lines[start : start + span])
        if i % 8 == 0:
            text = " ".join(text.split()[:3])  # a few tokens
        params = {"max_tokens": RNG.choice([1, 3, 8, 16, 24])}
        if i % 3 == 0:
            out.append({"id": f"q{i}", "messages": [{"role": "user", "content": text}], "params": params})
        else:
            out.append({"id": f"q{i}", "prompt": text, "params": params})
    return out


def reference(config: ModelConfig, rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Each request's greedy completion by transformers' generate(), one prompt at a time."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = str(config.generator_path)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    eos = list(config.generation.eos_token_ids)  # type: ignore[union-attr]
    out = {}
    for row in rows:
        if "messages" in row:
            text = tokenizer.apply_chat_template(row["messages"], add_generation_prompt=True, tokenize=False)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tokenizer(row["prompt"])["input_ids"]
        with torch.no_grad():
            generated = model.generate(
                torch.tensor([ids]),
                max_new_tokens=row["params"]["max_tokens"],
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=eos[0],
            )
        out[row["id"]] = [int(t) for t in generated[0, len(ids) :]]
    return out


ROWS = requests()
ENGINES = {
    "transformers": ("--engine", "transformers"),
    "vllm": ("--engine", "vllm", "--eager"),  # eager: each of the three starts takes seconds, not a minute
}
TINY = "tiny-llama"


@pytest.fixture(scope="module")
def repository_of(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Each model's repository, made when a test first asks (a test process that runs only one
    model's tests prepares only that one: SmolLM2's takes a minute on two cores)."""
    from model_import.causal_lm import import_causal_lm

    @functools.cache
    def repository(model: str) -> Path:
        if model == MODEL:
            return Path(request.getfixturevalue("smollm2_repository"))
        folder = request.getfixturevalue("tiny_llama_folder")
        return import_causal_lm(tmp_path_factory.mktemp("generators"), folder, TINY).directory.parents[1]

    return repository


@pytest.fixture(scope="module")
def expected_of(
    repository_of: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], dict[str, list[int]]]:
    """Each model's references, computed when a test first asks (SmolLM2's: minutes), once for
    every test process: the engines' tests of a model may run in two at once."""

    def write(model: str, folder: Path) -> None:
        want = reference(load_model_config(repository_of(model), model), ROWS)
        (folder / "expected.json").write_text(json.dumps(want))

    @functools.cache
    def expected(model: str) -> dict[str, list[int]]:
        folder = made_once(tmp_path_factory, f"generate-references-{model}", functools.partial(write, model))
        loaded: dict[str, list[int]] = json.loads((folder / "expected.json").read_text())
        return loaded

    return expected


@pytest.mark.long
@pytest.mark.timeout(1500)  # SmolLM2 on two cores: generation, two restarts and the reference run
@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("model", [MODEL, TINY])
def test_generation_gives_every_request_one_result_identical_to_generate(
    model: str,
    engine: str,
    expected_of: Callable[[str], dict[str, list[int]]],
    repository_of: Callable[[str], Path],
    settings: KafkaSettings,
    topics: Topics,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SmolLM2 with two SIGKILLs of the GPU worker mid-job; the seeded tiny Llama without (it
    finishes the job within a second: no kill would land inside it)."""
    monkeypatch.setenv("NEARLINE_PACK_RECORDS", "5")  # the job's records cut across 13 packs
    rows, want = ROWS, expected_of(model)
    python = vllm_python() if engine == "vllm" else sys.executable
    pipeline = RunningPipeline(settings, topics, repository_of(model), tmp_path / "logs")
    try:
        pipeline.start("preprocess", "preprocess")
        gpu_args = ("gpu", "--model", model, "--max-batch-size", "8", *ENGINES[engine])
        gpu = pipeline.start("gpu", *gpu_args, python=python)
        job_id = submit(pipeline, write_jsonl(tmp_path / "prompts.jsonl", rows), model=model)
        kills = (RNG.randint(4, 20), RNG.randint(28, 44)) if model == MODEL else ()
        for kill_at in kills:
            reached = follow_until(pipeline, topics.results, job_id, kill_at, timeout_s=600)
            gpu.process.send_signal(signal.SIGKILL)
            gpu.process.wait()
            assert reached < len(rows), f"the kill at {kill_at} landed after the job"
            gpu = pipeline.start("gpu", *gpu_args, python=python)
        finish_and_check(pipeline, job_id, [r["id"] for r in rows], tmp_path, timeout_s=900)
    finally:
        pipeline.stop()
    copies: dict[str, list[InferenceResult]] = {}
    for message in read_topics(settings, [topics.results]):
        result = decode(message.value, InferenceResult)
        copies.setdefault(result.record_id, []).append(result)
    assert sorted(copies) == sorted(want)
    for record_id, results in copies.items():
        for result in results:
            assert result.outputs[0].to_array().tolist() == want[record_id], record_id
    out = [json.loads(line) for line in (tmp_path / f"{job_id}.jsonl").read_text().splitlines()]
    assert all(line["finish_reason"] in ("stop", "length") and "text" in line for line in out)
