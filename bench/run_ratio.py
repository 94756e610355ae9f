"""Benchmark: `nearline run` end to end against the engine alone on the same texts.

    .venv/bin/python -m bench.run_ratio [--records 2000]

(1) `nearline run` as a user types it (a fresh process: embedded broker, workers, model load,
submit, results written), wall time from the command's start to its exit; (2) the same ONNX
model alone in this process on the same texts, tokenized beforehand, sorted by length, batch 32,
ONNX Runtime on every core, timed from the first batch to the last (and the same batches side by
side, one core each, as the GPU worker runs them on a CPU). The ratio (2) / (1) is what the
pipeline keeps of the engine's own speed, start-up included; with the run's own peak RSS. Figures,
never assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path

from bench.decoupling import exit_on_sigterm, machine
from bench.feed import short_texts
from bench.procfs import status_field
from gpu_consumer.batcher import make_batch
from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
from jobs.launch.kept_cache import ENV_RESULTS_CACHE
from jobs.launch.runner import ensure_model
from model_repository.config import ModelConfig
from model_repository.folders import ENV_MODEL_REPOSITORY, default_repository
from preprocess_app.models import load_tokenizer
from preprocess_app.text import tokenize


def engine_alone(config: ModelConfig, texts: list[str], batch: int) -> tuple[float, float]:
    """Seconds for every batch one after another on every core (the reference the target was set
    against), then for the same batches side by side, one core each (what the GPU worker's engine
    does on the CPU)."""
    ids = tokenize(load_tokenizer(config.tokenizer_path, config.max_length), texts, config.max_length)
    ids.sort(key=len)
    batches = [make_batch(config, ids[start : start + batch]).inputs for start in range(0, len(ids), batch)]
    engine = OnnxRuntimeEngine(config)
    engine.warmup()
    started = time.perf_counter()
    for inputs in batches:
        engine.infer(inputs)
    serial = time.perf_counter() - started
    started = time.perf_counter()
    for _ in engine.infer_many(batches):
        pass
    return serial, time.perf_counter() - started


def run_to_end(argv: list[str], env: dict[str, str], log: Path, timeout_s: float) -> int:
    """Run the command to its end; its peak RSS in KiB (VmHWM, read until it exits: the workers it
    starts are processes of their own and not counted)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline, peak = time.monotonic() + timeout_s, 0
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                raise TimeoutError(f"{' '.join(argv)} ran past {timeout_s:.0f} s; see {log}")
            with suppress(OSError):  # it may exit between poll and read
                peak = max(peak, status_field(proc.pid, "VmHWM"))
            time.sleep(0.05)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} exited with {proc.returncode}: {log.read_text()[-2000:]}")
    return peak


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--model-repository", type=Path, default=default_repository())
    args = parser.parse_args()
    repository = args.model_repository.resolve()
    config = ensure_model(repository, "minilm", print)
    texts = short_texts(args.records)
    with tempfile.TemporaryDirectory(prefix="nearline-run-ratio-") as tmp:
        source, output = Path(tmp) / "texts.jsonl", Path(tmp) / "out.jsonl"
        source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        # a kept results cache of its own: reusing an earlier run's results would not measure the pipeline
        env = {**os.environ, ENV_MODEL_REPOSITORY: str(repository), ENV_RESULTS_CACHE: str(Path(tmp) / "kept")}
        env.pop("NEARLINE_BOOTSTRAP_SERVERS", None)  # the embedded default, as README command 1
        started = time.perf_counter()
        argv = [sys.executable, "-m", "jobs.cli", "run", str(source), "--model", "minilm", "-o", str(output)]
        peak_kib = run_to_end(argv, env, Path(tmp) / "run.log", timeout_s=900)
        run_s = time.perf_counter() - started
        lines = sum(1 for _ in output.open(encoding="utf-8"))
    alone_s, lanes_s = engine_alone(config, texts, 32)
    print(f"machine: {machine()}")
    print(f"nearline run, {lines} results: {run_s:.1f} s end to end; its own peak RSS {peak_kib / 1024:.0f} MiB")
    print(f"engine alone (ONNX Runtime, sorted, batch 32, each batch on every core): {alone_s:.1f} s")
    print(f"  the same batches side by side, one core each: {lanes_s:.1f} s")
    print(f"ratio engine alone / run: {alone_s / run_s:.2f} (side by side: {lanes_s / run_s:.2f})")


if __name__ == "__main__":
    main()
