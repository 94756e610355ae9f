"""On a GPU: what capturing every CUDA graph at start-up costs, and what it saves mid-job.

    python3 -m bench.graph_warmup --model-repository .device/models [--batches 300]

The torch engine replays one CUDA graph per (rows, length) shape a batch can take. Two fresh
engines, in one process, run the same seeded sequence of batch shapes (every shape, in random
order, several times): one with only the largest shape warmed (graphs captured as shapes are first
met, as the worker did before) and one after `warmup()` captured them all. Prints the start-up
cost, the rate and the slowest call of each, and the GPU memory the graphs hold. Without CUDA there
are no graphs: it says so and exits 0 (the CPU dry run).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from gpu_consumer.batcher import shaped_batch, warmup_batch
from gpu_consumer.torch_engine import TorchEngine, graph_shapes
from schemas.model_config import load_model_config


def run(engine: TorchEngine, batches: list[dict[str, np.ndarray]]) -> dict[str, float]:
    rows, slowest, started = 0, 0.0, time.perf_counter()
    for inputs in batches:
        t = time.perf_counter()
        engine.infer(inputs)
        slowest = max(slowest, time.perf_counter() - t)
        rows += len(next(iter(inputs.values())))
    elapsed = time.perf_counter() - started
    return {
        "records_per_s": round(rows / elapsed),
        "seconds": round(elapsed, 3),
        "slowest_call_ms": round(slowest * 1e3, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-repository", type=Path, default=Path("models"))
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("graph warmup: no CUDA here, so no CUDA graphs to capture; nothing to measure")
        return
    config = load_model_config(args.model_repository, args.model)
    shapes = graph_shapes(config, config.max_batch_size)
    rng = np.random.default_rng(7)
    sequence = [shapes[i] for i in rng.integers(0, len(shapes), args.batches)]
    batches = [shaped_batch(config, rows, length).inputs for rows, length in sequence]

    cold = TorchEngine(config)
    cold.infer(warmup_batch(config).inputs)  # the warm-up before this change: the largest shape only
    torch.cuda.synchronize()
    cold_figures = run(cold, batches)
    del cold
    torch.cuda.empty_cache()

    before = torch.cuda.memory_reserved()
    warm = TorchEngine(config)
    started = time.perf_counter()
    warm.warmup()
    torch.cuda.synchronize()
    startup = time.perf_counter() - started
    held = torch.cuda.memory_reserved() - before
    warm_figures = run(warm, batches)
    print(
        json.dumps(
            {
                "model": args.model,
                "shapes": len(shapes),
                "batches": args.batches,
                "distinct_shapes_met": len(set(sequence)),
                "warmup_s": round(startup, 2),
                "gpu_memory_held_mib": round(held / 2**20),
                "graphs_captured_as_met": cold_figures,
                "all_graphs_captured_first": warm_figures,
            }
        )
    )


if __name__ == "__main__":
    main()
