"""Benchmark: the engine alone, records/s against the executed batch's size, on short texts.

    python3 -m bench.engine_curve [--model-repository PATH] [--model minilm] [--engine torch]
                                  [--sizes 64 128 256 512 1024] [--records 8192] [--max-batch-tokens N]

The shipped example's sentences (the system cost benchmark's short texts), tokenized by the model's
tokenizer and cut into executed batches as the GPU worker cuts them (`plan_batches`: sorted by
length, padded to the engine's buckets where it pads to buckets) at each row limit in --sizes,
then run through one engine (`infer_many`, pipelined as the worker runs it) after its warm-up.
Prints records/s and the mean rows and padded width per batch at each size: the curve the
torch engine's CUDA defaults (gpu_consumer/engines/factory.py: CUDA_BATCH_ROWS, CUDA_BATCH_TOKENS) are to be
chosen from. On a CPU it runs the same, slower (the GPU dry run's check that it runs). Figures,
never assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from bench.feed import short_texts
from gpu_consumer.batcher import BatchSettings, bucket_of, make_batch, plan_batches
from gpu_consumer.engines.factory import make_engine
from gpu_consumer.engines.protocol import Engine, infer_all
from model_repository.config import ModelConfig
from model_repository.folders import ENV_MODEL_REPOSITORY, default_repository, load_model_config


def token_ids(config: ModelConfig, texts: list[str]) -> list[np.ndarray]:
    from preprocess_app.models import load_tokenizer

    assert config.tokenizer is not None
    tokenizer = load_tokenizer(config.tokenizer_path, config.tokenizer.max_length)
    return [np.asarray(e.ids, dtype=np.int64) for e in tokenizer.encode_batch(texts)]


def curve_point(
    engine: Engine, config: ModelConfig, ids: list[np.ndarray], rows: int, tokens: int | None
) -> dict[str, float]:
    lengths = [len(a) for a in ids]
    plans = plan_batches(lengths, BatchSettings(rows, tokens), config.buckets, engine.pad_to_bucket)
    batches = []
    for plan in plans:
        width = max(lengths[i] for i in plan)
        if engine.pad_to_bucket:  # as the worker pads for static-shape engines
            width = bucket_of(width, config.buckets)
        batches.append(make_batch(config, [ids[i] for i in plan], width).inputs)
    for _ in infer_all(engine, batches[:2]):  # the shapes' first calls are not the rate
        pass
    started = time.perf_counter()
    for _ in infer_all(engine, batches):
        pass
    elapsed = time.perf_counter() - started
    return {
        "max_rows": rows,
        "records_per_s": round(len(ids) / elapsed),
        "mean_rows": round(len(ids) / len(batches), 1),
        "mean_width": round(float(np.mean([next(iter(b.values())).shape[1] for b in batches])), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-repository", type=Path, default=None)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128, 256, 512, 1024])
    parser.add_argument("--records", type=int, default=8192)
    parser.add_argument("--max-batch-tokens", type=int, default=None, help="also bound each batch's padded tokens")
    args = parser.parse_args()
    repository = args.model_repository or Path(os.environ.get(ENV_MODEL_REPOSITORY) or default_repository())
    config = load_model_config(repository, args.model)
    ids = token_ids(config, short_texts(args.records))
    largest = max(args.sizes)
    engine = make_engine(config, args.engine, 0, largest, args.max_batch_tokens or largest * config.max_length)
    engine.warmup()
    print(f"engine alone, {len(ids):,} short texts of {config.name}, on {engine.name}:")
    for rows in sorted(args.sizes):
        print(json.dumps(curve_point(engine, config, ids, rows, args.max_batch_tokens)), flush=True)


if __name__ == "__main__":
    main()
