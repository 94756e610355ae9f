"""Each container of the manifests with what it runs: its environment, and what the real CLI makes
of its command line under that environment."""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from kafka_io.settings import KafkaSettings
from tests.support.deploy.cli_commands import Invocation, environment, resolve
from tests.support.deploy.manifests import Doc, Manifests, container_env, label, pod_spec

# KafkaSettings without a reachable cluster: librdkafka checks its configuration when a client
# is made, and this address refuses at once instead of waiting on DNS.
NO_CLUSTER = "127.0.0.1:9"


@dataclass
class Container:
    workload: Doc
    spec: Doc
    env: dict[str, str]
    invocation: Invocation | None  # None when the CLI refuses the command line
    problems: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{label(self.workload)} container {self.spec['name']}"

    @property
    def path(self) -> str:
        return self.invocation.path if self.invocation else ""

    @property
    def pod(self) -> Doc:
        return pod_spec(self.workload)

    def kafka_settings(self) -> KafkaSettings:
        """What KafkaSettings.from_env makes of the container's NEARLINE_KAFKA_* variables."""
        with environment(self.env):
            return KafkaSettings.from_env(NO_CLUSTER)


def containers(manifests: Manifests) -> list[Container]:
    found = []
    for workload, spec in manifests.containers():
        env, problems = container_env(manifests, spec)
        args = [str(a) for a in spec.get("args", [])]
        invocation = None
        try:
            invocation = resolve(args, env)
        except click.ClickException as exc:
            first_line = exc.format_message().strip().splitlines()[0]
            problems.append(f"`nearline {' '.join(args)}` is refused by the CLI: {type(exc).__name__}: {first_line}")
        found.append(Container(workload, spec, env, invocation, [f"{label(workload)}: {p}" for p in problems]))
    return found


def running(manifests: Manifests, path: str) -> list[Container]:
    """The containers whose command is `path` (e.g. "nearline worker gpu")."""
    return [c for c in containers(manifests) if c.path == path]
