"""Benchmark: the preprocess worker's text step alone, in-process, in CPU time per record.

    .venv/bin/python -m bench.text_step [--records 6400] [--rounds 5] [--reuse]

Runs preprocess_app.text.preprocess_texts, what the worker runs on each batch of 64, over short
texts (bench.system_cost's) as RawText records, with the packaged MiniLM's tokenizer on one
thread, and prints the best round's CPU microseconds a record, and the tokenizer alone on the same
batches: the step's own cost is the difference. No broker, no faust: the figure moves only with
the step's code, so a change to it can be measured in a few seconds, before and after in one
sitting (bench/HISTORY.md). `--reuse`: the step looks each text up in an empty results cache
first, as a worker does (preprocess_app/reuse.py): every record misses, and the figure is the
miss path's, its key and lookup included. Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ["RAYON_NUM_THREADS"] = "1"  # read when the tokenizers thread pool starts: before first use

from bench.decoupling import machine
from bench.system_cost import MODEL, texts_of
from jobs.launch.runner import ensure_model
from kafka_io.records import ConsumedRecord
from kafka_io.topology import Topics
from model_repository.config import ModelConfig
from model_repository.folders import default_repository
from preprocess_app.models import Models
from preprocess_app.reuse import CachedResults, EngineResults, ReuseLookup
from preprocess_app.text import preprocess_texts
from reuse.store import ResultStore
from schemas.raw_text_bytes import raw_text_bytes

BATCH = 64
JOB = "job-20261204-110000-abcdef"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=6400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reuse", action="store_true", help="look every text up in an empty results cache first")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nearline-text-step-") as spool:
        # looked up as a worker's are: under the cache keys of the engine a GPU worker named
        store = EngineResults(ResultStore(Path(spool)), SimpleNamespace(runtime="onnxruntime/CPUExecutionProvider"))

        def open_cache(config: ModelConfig) -> CachedResults:
            return store

        measure(args.records, args.rounds, ReuseLookup(open_cache) if args.reuse else None)


def measure(records: int, rounds: int, reuse: ReuseLookup | None) -> None:
    repository = default_repository()
    ensure_model(repository, MODEL, lambda line: None)
    topics = Topics()
    texts = texts_of("short", records)
    sources = [
        ConsumedRecord(
            topics.raw_text,
            0,
            i,
            raw_text_bytes(JOB, f"r{i}", i, MODEL, text, 1_764_822_600_123_456, {}),
            f"{JOB}/r{i}".encode(),
            (("job_id", JOB.encode()),),
        )
        for i, text in enumerate(texts)
    ]
    batches = [sources[i : i + BATCH] for i in range(0, len(sources), BATCH)]
    models = Models(repository)
    model = models(MODEL)
    assert model.tokenizer is not None
    text_batches = [texts[i : i + BATCH] for i in range(0, len(texts), BATCH)]

    def best(run: Callable[[], Any]) -> float:
        fastest = float("inf")
        for _ in range(rounds):
            started = time.process_time()
            run()
            fastest = min(fastest, (time.process_time() - started) / len(texts) * 1e6)
        return fastest

    tokenizer = model.tokenizer
    preprocess_texts(batches[0], models, topics, reuse=reuse)  # warm (and the fingerprint taken)
    step = best(lambda: [preprocess_texts(b, models, topics, reuse=reuse) for b in batches])
    alone = best(lambda: [tokenizer.encode_batch(b) for b in text_batches])
    print(f"{len(texts):,} short texts, batches of {BATCH}, one tokenizer thread, CPU us a record", end="")
    print(f" (best of {rounds}{', every text looked up and missed' if reuse else ''}):")
    print(f"  the text step       {step:6.1f}")
    print(f"  the tokenizer alone {alone:6.1f}")
    print(f"  the step's own      {step - alone:6.1f}")
    print(f"machine: {machine()}")


if __name__ == "__main__":
    main()
