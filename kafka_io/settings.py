"""Where the cluster is and how names are spelled: one frozen dataclass each, read from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

ENV_BOOTSTRAP = "NEARLINE_BOOTSTRAP_SERVERS"
ENV_NAMESPACE = "NEARLINE_NAMESPACE"
# librdkafka properties for every client, e.g. NEARLINE_KAFKA_SECURITY_PROTOCOL=SASL_SSL
# becomes security.protocol; this is how production adds TLS/SASL without code changes.
ENV_KAFKA_PREFIX = "NEARLINE_KAFKA_"
# The metrics port every worker reads (--metrics-port), which deployments set once per pod.
ENV_METRICS_PORT = "NEARLINE_METRICS_PORT"


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str
    client_id: str = "nearline"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, bootstrap_servers: str | None = None, client_id: str = "nearline") -> KafkaSettings:
        servers = bootstrap_servers or os.environ.get(ENV_BOOTSTRAP, "")
        extra = {
            key[len(ENV_KAFKA_PREFIX) :].lower().replace("_", "."): value
            for key, value in os.environ.items()
            if key.startswith(ENV_KAFKA_PREFIX)
        }
        return cls(servers, client_id, extra)

    def with_client_id(self, client_id: str) -> KafkaSettings:
        return replace(self, client_id=client_id)


@dataclass(frozen=True)
class Topics:
    """Topic and consumer-group names. A namespace prefixes all of them, so several pipelines
    (or test runs) share one cluster without seeing each other's records."""

    namespace: str = ""

    @classmethod
    def from_env(cls, namespace: str | None = None) -> Topics:
        return cls(namespace if namespace is not None else os.environ.get(ENV_NAMESPACE, ""))

    def _name(self, base: str) -> str:
        return f"{self.namespace}.{base}" if self.namespace else base

    @property
    def raw_text(self) -> str:
        return self._name("raw.text")

    @property
    def raw_image(self) -> str:
        return self._name("raw.image")

    @property
    def results(self) -> str:
        return self._name("results")

    @property
    def jobs(self) -> str:
        return self._name("jobs")

    @property
    def schedules(self) -> str:
        return self._name("schedules")

    @property
    def schedule_ticks(self) -> str:
        return self._name("schedule.ticks")

    @property
    def dead_letters(self) -> str:
        return self._name("dead.letters")

    def tensors(self, model: str) -> str:
        return self._name(f"tensors.{model}")

    def gpu_group(self, model: str) -> str:
        return self._name(f"gpu.{model}")

    @property
    def preprocess_app_id(self) -> str:
        return self._name("preprocess")
