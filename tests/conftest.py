"""Fixtures: a real broker for the session, fresh names per test, models in a temporary repository."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import KafkaSettings, Topics
from schemas.model_config import ModelConfig
from tests.support.apache_kafka import ApacheKafka
from tests.support.tiny_model import TinyModel, build_tiny_model

# Fixtures shared by every folder of tests: worker processes, the scheduler's clock (tests/support/).
pytest_plugins = ["tests.support.fixtures"]


# Which broker the session's tests use: the embedded Tansu (the default, what `nearline run` starts),
# Apache Kafka started from .ci/setup's cache (NEARLINE_TEST_BROKER=kafka), or one already running
# at $KAFKA_BOOTSTRAP_SERVERS. docs/tests.md says which tests run on which.
TEST_BROKER = os.environ.get("NEARLINE_TEST_BROKER", "tansu")


@pytest.fixture(scope="session")
def embedded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker | None]:
    """The embedded Tansu broker for this session, or None when the session runs on another broker."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or TEST_BROKER == "kafka":
        yield None
        return
    broker = EmbeddedBroker.start(tmp_path_factory.mktemp("broker") / "broker.log")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    """A single-node Apache Kafka (KRaft, data on disk) for this session."""
    broker = ApacheKafka.start(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def bootstrap_servers(request: pytest.FixtureRequest, embedded_broker: EmbeddedBroker | None) -> str:
    if embedded_broker is not None:
        return embedded_broker.bootstrap_servers
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    broker: ApacheKafka = request.getfixturevalue("apache_kafka")
    return broker.bootstrap_servers


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
    from gpu_consumer.export import prepare_efficientnet_lite0

    return prepare_efficientnet_lite0(model_repository)


@pytest.fixture(scope="session")
def minilm(model_repository: Path) -> ModelConfig:
    """The real all-MiniLM-L6-v2, prepared into the session's model repository."""
    from gpu_consumer.export import prepare_minilm

    return prepare_minilm(model_repository)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu` tests run only where torch sees a CUDA device (the device script runs them there)."""
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
