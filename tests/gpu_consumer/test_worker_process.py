"""The GPU worker as its own process: what it needs installed to serve."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kafka_io.reading import read_topics
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from schemas import InferenceResult, decode
from tests.support.pipeline import RunningPipeline, feed_tensors
from tests.support.tiny_model import TinyModel

# What only schedules (croniter, and the pytz it imports) and the preprocess stage (faust) use.
# The GPU machine's image has none of them; the worker must not import them to serve.
NOT_INSTALLED = ("croniter", "pytz", "faust", "aiokafka")


def test_the_gpu_worker_serves_without_the_scheduler_or_faust_installed(
    settings: KafkaSettings, topics: Topics, tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    feed_tensors(settings, topics, "job-1", 5)
    # None in sys.modules makes `import croniter` raise ImportError, as on a machine without it
    code = f"import sys; sys.modules.update(dict.fromkeys({NOT_INSTALLED!r})); from jobs.cli import main; main()"
    env = RunningPipeline(settings, topics, model_repository, tmp_path).env()
    done = subprocess.run(
        [sys.executable, "-c", code, "worker", "gpu", "--model", "tiny", "--drain"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    results = [decode(m.value or b"", InferenceResult) for m in read_topics(settings, [topics.results])]
    assert sorted(r.record_id for r in results) == [f"r{i}" for i in range(5)]
