"""Fixtures: a real broker for the session, fresh names per test, models in a temporary repository."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs.launch.kept_cache import ENV_RESULTS_CACHE
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from model_repository.config import ModelConfig
from tests.support.apache_kafka import ApacheKafka
from tests.support.tiny_model import TinyModel, build_tiny_model

# Fixtures shared by every folder of tests: worker processes, the scheduler's clock (tests/support/).
pytest_plugins = ["tests.support.fixtures"]


# Which broker a test runs on. The trials and the end-to-end tests run on Apache Kafka (KRaft, data
# on disk, from .ci/setup's cache), the broker our users run, whose guarantees they check; the
# rest on the embedded Tansu, the default `nearline run` starts. NEARLINE_TEST_BROKER=tansu or
# =kafka runs every test on one; $KAFKA_BOOTSTRAP_SERVERS names a broker already running.
# docs/tests.md says which tests run on which and why.
KAFKA_FOLDERS = ("trials", "end_to_end")


def broker_kind(test_path: Path) -> str:
    chosen = os.environ.get("NEARLINE_TEST_BROKER")
    if chosen:
        if chosen not in ("tansu", "kafka"):
            raise pytest.UsageError(f"NEARLINE_TEST_BROKER={chosen!r}: use tansu or kafka")
        return chosen
    folder = test_path.relative_to(Path(__file__).parent).parts[0]
    return "kafka" if folder in KAFKA_FOLDERS else "tansu"


@pytest.fixture(scope="session")
def embedded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """The embedded Tansu broker of this session, started when a test first needs it."""
    broker = EmbeddedBroker.start(tmp_path_factory.mktemp("broker") / "broker.log")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    """A single-node Apache Kafka (KRaft, data on disk) of this session, started when first needed."""
    broker = ApacheKafka.start(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def test_broker(request: pytest.FixtureRequest) -> EmbeddedBroker | ApacheKafka | None:
    """The broker this test runs on (broker_kind); None: the one at $KAFKA_BOOTSTRAP_SERVERS."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return None
    kind = broker_kind(request.node.path)
    broker: EmbeddedBroker | ApacheKafka = request.getfixturevalue(
        "apache_kafka" if kind == "kafka" else "embedded_broker"
    )
    return broker


@pytest.fixture
def bootstrap_servers(test_broker: EmbeddedBroker | ApacheKafka | None) -> str:
    return test_broker.bootstrap_servers if test_broker else os.environ["KAFKA_BOOTSTRAP_SERVERS"]


@pytest.fixture
def settings(bootstrap_servers: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers)


@pytest.fixture
def topics() -> Topics:
    """Unique topic and group names per test (Tansu groups can wedge; never share them)."""
    return Topics(f"t{uuid.uuid4().hex[:10]}")


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def tiny(model_repository: Path) -> TinyModel:
    return build_tiny_model(model_repository)


@pytest.fixture(scope="session")
def efficientnet(model_repository: Path) -> ModelConfig:
    """The real EfficientNet-Lite0, prepared into the session's model repository."""
    from model_import.export import prepare_efficientnet_lite0

    return prepare_efficientnet_lite0(model_repository)


@pytest.fixture(scope="session")
def minilm(model_repository: Path) -> ModelConfig:
    """The real all-MiniLM-L6-v2, prepared into the session's model repository."""
    from model_import.export import prepare_minilm

    return prepare_minilm(model_repository)


@pytest.fixture(scope="session")
def smollm2_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's transformers tokenizer (BPE, chat template), read from its packaged GGUF."""
    from tests.support.causal_lm import load_smollm2_tokenizer

    return load_smollm2_tokenizer()


@pytest.fixture(scope="session")
def tiny_llama_folder(tmp_path_factory: pytest.TempPathFactory, smollm2_tokenizer: Any) -> Path:
    """A transformers folder: a tiny seeded LlamaForCausalLM with SmolLM2's tokenizer and chat
    template (tests/support/causal_lm.py), for `models import` and the generation engines."""
    from tests.support.causal_lm import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smollm2_tokenizer)


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> ModelConfig:
    """The real SmolLM2-135M-Instruct, prepared (fp32, 0.5 GB) into a model repository of its own."""
    from model_import.causal_lm import SMOLLM2_NAME, prepare_smollm2
    from model_repository.folders import load_model_config
    from tests.support.shared import made_once

    return load_model_config(made_once(tmp_path_factory, "smollm2-models", prepare_smollm2), SMOLLM2_NAME)


@pytest.fixture(scope="session")
def smollm2_repository(smollm2: ModelConfig) -> Path:
    """The model repository that holds smollm2-135m version 1 (and nothing else)."""
    return smollm2.directory.parents[1]


# A test that asks for one of these (itself or through another fixture) needs a broker or exports a
# real model (tens of seconds): not a unit test.
REAL_MODEL_FIXTURES = frozenset({"minilm", "efficientnet", "smollm2", "smollm2_repository"})
NOT_UNIT_FIXTURES = frozenset({"test_broker", "embedded_broker", "apache_kafka", *REAL_MODEL_FIXTURES})


def mark_unit(items: list[pytest.Item]) -> None:
    """The unit tier (`bash .ci/test --unit`): every test outside the trials and the end-to-end
    tests that needs no broker, no real model and no process of its own, marked `unit` here from
    the fixtures it uses. A test that starts a process without such a fixture (the CLI in a
    subprocess, a broker it starts itself) is marked `process` in its module; the unit tier fails
    any unmarked one that does (unit_guard), so the tier stays what it says."""
    for item in items:
        if REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.real_model)  # a shipped model: what --fast leaves out
        folder = item.path.relative_to(Path(__file__).parent).parts[0]
        if folder in ("trials", "end_to_end") or "real_model" in item.keywords or "long" in item.keywords:
            continue
        if "process" in item.keywords or NOT_UNIT_FIXTURES & set(getattr(item, "fixturenames", ())):
            continue
        item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True)
def kept_results_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own folder for the results caches `nearline run` keeps between runs (docs/reuse.md),
    so that no test reuses the results of another (or of the user running the tests)."""
    folder = tmp_path_factory.mktemp("kept-results")
    monkeypatch.setenv(ENV_RESULTS_CACHE, str(folder))
    return folder


@pytest.fixture(autouse=True)
def subprocess_tmpdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The processes a test starts make their temporary files in a folder of the test's (pytest
    removes it with its run), not in /tmp: a `nearline run` that fails or is stopped keeps its
    folder of logs there by design, and tests that do so on purpose had filled /tmp with them."""
    monkeypatch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmp")))


@pytest.fixture(autouse=True)
def unit_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `.ci/test --unit`, a unit test that starts a process fails, naming the marker it lacks."""
    if os.environ.get("NEARLINE_TEST_TIER") != "unit" or "unit" not in request.keywords:
        return

    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail(f"{request.node.nodeid} starts a process {args[1:2]}: mark it @pytest.mark.process")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu` tests run only where torch sees a CUDA device (the device script runs them there)."""
    mark_unit(items)
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
