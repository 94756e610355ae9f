"""On a GPU: what capturing every CUDA graph at start-up costs, and what it saves mid-job.

    python3 -m bench.graph_warmup --model-repository .device/models [--model minilm] [--batches 300]

The torch engine replays one CUDA graph per (rows, length) shape a batch can take. Two fresh
processes, one after the other, run the same seeded sequence of batch shapes (every shape, in
random order, several times) through a new engine: one warmed on the largest shape only (graphs
captured as shapes are first met, as the worker did before) and one after `warmup()` captured them
all. Each process pays its own one-time CUDA, cuBLAS and cuDNN set-up, so neither gains from the
other's. Prints the start-up cost (engine load and warm-up), the rate and slowest call over the
sequence, and the GPU memory warm-up added (the graphs' pools). Without CUDA there are no graphs:
it says so and exits 0 (the CPU dry run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from gpu_consumer.batcher import shaped_batch, warmup_batch
from gpu_consumer.engines.torch_engine import TorchEngine, graph_shapes
from model_repository.folders import load_model_config


def one_process(repository: Path, model: str, batches: int, all_first: bool) -> dict[str, float]:
    """The figures of one engine in this process: `all_first` warms every shape, else the largest."""
    import torch

    config = load_model_config(repository, model)
    shapes = graph_shapes(config, config.max_batch_size)
    rng = np.random.default_rng(7)
    sequence = [shaped_batch(config, *shapes[i]).inputs for i in rng.integers(0, len(shapes), batches)]
    started = time.perf_counter()
    engine = TorchEngine(config)
    torch.cuda.synchronize()
    loaded, before = time.perf_counter(), torch.cuda.memory_reserved()
    if all_first:
        engine.warmup()
    else:
        engine.infer(warmup_batch(config).inputs)  # the warm-up before graphs were captured at start
    torch.cuda.synchronize()
    warmed = time.perf_counter()
    held = torch.cuda.memory_reserved() - before
    rows, slowest = 0, 0.0
    for inputs in sequence:
        t = time.perf_counter()
        engine.infer(inputs)
        slowest = max(slowest, time.perf_counter() - t)
        rows += len(next(iter(inputs.values())))
    elapsed = time.perf_counter() - warmed
    return {
        "load_s": round(loaded - started, 2),
        "warmup_s": round(warmed - loaded, 2),
        "warmup_gpu_mib": round(held / 2**20),
        "records_per_s": round(rows / elapsed),
        "slowest_call_ms": round(slowest * 1e3, 1),
        "distinct_shapes": len({tuple(a.shape for a in inputs.values()) for inputs in sequence}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-repository", type=Path, default=Path("models"))
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--one", choices=["as-met", "all-first"], help=argparse.SUPPRESS)  # a child process
    args = parser.parse_args()
    import torch

    if args.one:
        figures = one_process(args.model_repository, args.model, args.batches, args.one == "all-first")
        print(json.dumps(figures))
        return
    if not torch.cuda.is_available():
        print("graph warmup: no CUDA here, so no CUDA graphs to capture; nothing to measure")
        return
    report: dict[str, object] = {"model": args.model, "batches": args.batches}
    for mode in ("as-met", "all-first"):
        argv = [sys.executable, "-m", "bench.graph_warmup", "--model-repository", str(args.model_repository)]
        argv += ["--model", args.model, "--batches", str(args.batches), "--one", mode]
        done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=300)
        report[f"graphs_captured_{mode}"] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(report))


if __name__ == "__main__":
    main()
