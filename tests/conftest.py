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
from tests.support.tiny_model import TinyModel, build_tiny_model

# The worker-pair fixtures, once only for tests/jobs/, now for every folder of tests.
pytest_plugins = ["tests.support.fixtures"]


@pytest.fixture(scope="session")
def embedded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker | None]:
    """The embedded Tansu broker for this session, or None when $KAFKA_BOOTSTRAP_SERVERS names one."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield None
        return
    broker = EmbeddedBroker.start(tmp_path_factory.mktemp("broker") / "broker.log")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def bootstrap_servers(embedded_broker: EmbeddedBroker | None) -> str:
    return embedded_broker.bootstrap_servers if embedded_broker else os.environ["KAFKA_BOOTSTRAP_SERVERS"]


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
