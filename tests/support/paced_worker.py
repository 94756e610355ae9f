"""A GPU worker process whose engine takes a fixed time a record: the tiny model run by ONNX
Runtime, then a sleep of --per-record-ms for each row. The lane share is of engine *time*; with
the tiny model alone a window's time is a fraction of a millisecond, mostly GIL waits and another
process's CPU, so a share of records did not stand for it. Paced, engine time is records.

    python -m tests.support.paced_worker BOOTSTRAP NAMESPACE REPOSITORY --bulk-share 0.3 --max-window 32
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
from gpu_consumer.engines.protocol import Engine
from gpu_consumer.worker import GpuWorkerSettings, serve
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from model_repository.folders import load_model_config


@dataclass
class PacedEngine(Engine):
    inner: Engine
    per_record_s: float
    name: str = "paced"
    pad_to_bucket: bool = False
    postprocessed: tuple[str, ...] = ()
    max_batch_size: int = 0

    def __post_init__(self) -> None:
        self.max_batch_size, self.postprocessed = self.inner.max_batch_size, self.inner.postprocessed

    def warmup(self) -> None:
        self.inner.warmup()

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = len(next(iter(inputs.values())))
        time.sleep(rows * self.per_record_s)  # releases the GIL, as waiting on a device does
        return self.inner.infer(inputs)

    def infer_many(self, batches: Iterable[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
        for inputs in batches:
            yield self.infer(inputs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("namespace")
    parser.add_argument("repository", type=Path)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--per-record-ms", type=float, default=1.0)
    parser.add_argument("--bulk-share", type=float, required=True)
    parser.add_argument("--max-window", type=int, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    config = load_model_config(args.repository, args.model)
    engine = PacedEngine(OnnxRuntimeEngine(config), args.per_record_ms / 1000.0)
    serve(
        KafkaSettings(args.bootstrap),
        Topics(args.namespace),
        args.repository,
        GpuWorkerSettings(args.model, max_window=args.max_window, bulk_share=args.bulk_share),
        engine=engine,
    )


if __name__ == "__main__":
    main()
