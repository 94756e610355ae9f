"""Benchmark: the full decoupled pipeline against the engine alone, same workload, one run.

    .venv/bin/python -m bench.pipeline_vs_engine [--records N] [--batch-size B]

(d) engine alone: the records tokenized beforehand, batched in arrival order at the worker's
    batch size and padded the same way; times engine.infer + postprocess only. The ceiling.
(c) pipeline: embedded broker, one preprocess worker and one GPU worker (warmed up by a small
    job first), the workload submitted as one job; from submit to the last result.
Prints records/s for each and the ratio (c)/(d). Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from gpu_consumer.batcher import pad_batch
from gpu_consumer.engine import make_engine
from gpu_consumer.postprocess import postprocess
from jobs.local import start_pipeline_workers, stop_all
from jobs.runner import ensure_model, watch_job
from jobs.submit import JobInput, submit
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import KafkaSettings, Topics
from preprocess_app.models import load_tokenizer
from preprocess_app.text import tokenize
from schemas.model_config import ModelConfig

EXAMPLE = Path(__file__).parents[1] / "producers" / "examples" / "python-docs-paragraphs.jsonl"


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def engine_alone(config: ModelConfig, texts: list[str], batch_size: int) -> dict[str, float]:
    tokenizer = load_tokenizer(config.tokenizer_path, config.max_length)
    ids = tokenize(tokenizer, texts, config.max_length)
    engine = make_engine(config)
    engine.warmup()
    busy = 0.0
    real_tokens = padded_tokens = 0
    for start in range(0, len(ids), batch_size):
        batch = pad_batch(config, ids[start : start + batch_size])
        t0 = time.perf_counter()
        postprocess(config, engine.infer(batch.inputs), batch)
        busy += time.perf_counter() - t0
        real_tokens += int(batch.lengths.sum())
        padded_tokens += batch.padded_tokens
    return {
        "records_per_s": len(ids) / busy,
        "seconds": busy,
        "padding_waste": 1 - real_tokens / padded_tokens,
    }


def pipeline(repository: Path, config: ModelConfig, workload: Path, batch_size: int, workdir: Path) -> dict[str, float]:
    broker = EmbeddedBroker.start(workdir / "broker.log")
    settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("bench")
    workers = start_pipeline_workers(
        config.name,
        bootstrap_servers=broker.bootstrap_servers,
        namespace=topics.namespace,
        repository=repository,
        logs=workdir,
        gpu_args=("--max-batch-size", str(batch_size)),
    )
    try:

        def check() -> None:
            for w in workers:
                w.check_alive()

        warm = workdir / "warmup.jsonl"
        warm.write_text("".join(json.dumps({"text": f"warm up sentence {i}"}) + "\n" for i in range(batch_size)))
        report = submit(settings, topics, JobInput(warm, "text"), config.name)
        watch_job(settings, topics, report.job_id, report.submitted, check=check, timeout_s=300)

        started = time.perf_counter()
        report = submit(settings, topics, JobInput(workload, "text"), config.name)
        outcome, _ = watch_job(settings, topics, report.job_id, report.submitted, check=check, timeout_s=1800)
        seconds = time.perf_counter() - started
        sizes = {r.batch_id: r.batch_size for r in outcome.results.values()}
        return {
            "records_per_s": len(outcome.results) / seconds,
            "seconds": seconds,
            "mean_batch_size": sum(sizes.values()) / len(sizes),
        }
    finally:
        stop_all(workers)
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--records", type=int, default=1200, help="first N records of the shipped example")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--model-repository", type=Path, default=Path(os.environ.get("NEARLINE_MODEL_REPOSITORY", "models"))
    )
    args = parser.parse_args()

    config = ensure_model(args.model_repository, args.model, print)
    rows = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()][: args.records]
    with tempfile.TemporaryDirectory(prefix="nearline-bench-") as tmp:
        workdir = Path(tmp)
        workload = workdir / "workload.jsonl"
        workload.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        alone = engine_alone(config, [r["text"] for r in rows], args.batch_size)
        piped = pipeline(args.model_repository, config, workload, args.batch_size, workdir)

    print(f"\nmachine: {machine()}")
    print(
        f"workload: {len(rows)} records of {EXAMPLE.name}, model {config.name}:{config.version}, "
        f"batch size {args.batch_size}, engine onnxruntime (CPU)"
    )
    print(f"{'configuration':<34}{'records/s':>12}{'seconds':>10}")
    print(f"{'(d) engine alone, same batches':<34}{alone['records_per_s']:>12.1f}{alone['seconds']:>10.1f}")
    print(f"{'(c) decoupled pipeline via Kafka':<34}{piped['records_per_s']:>12.1f}{piped['seconds']:>10.1f}")
    print(f"ratio (c)/(d): {piped['records_per_s'] / alone['records_per_s']:.2f}")
    print(
        f"padding waste (arrival order, pad to longest): {alone['padding_waste']:.1%}; "
        f"pipeline mean executed batch size {piped['mean_batch_size']:.1f}"
    )


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
