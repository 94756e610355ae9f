"""The topology: every topic and consumer group name (Topics), the namespace that prefixes them
all, and the lanes (live before bulk) each stage topic comes in."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import Literal

ENV_NAMESPACE = "NEARLINE_NAMESPACE"

# A job's priority lane: live records are served before bulk ones at every stage. Each
# stage topic has one topic per lane (Topics.lane), so Kafka keeps the lanes apart and a worker
# can pause one lane's partitions without touching the other's.
Lane = Literal["live", "bulk"]
LANES: tuple[Lane, ...] = ("live", "bulk")  # serving order
DEFAULT_LANE: Lane = "bulk"
LIVE_PREFIX = "live."


@dataclass(frozen=True)
class Topics:
    """Topic and consumer-group names. A namespace prefixes all of them, so several pipelines
    (or test runs) share one cluster without seeing each other's records."""

    namespace: str = ""

    @classmethod
    def from_env(cls, namespace: str | None = None) -> Topics:
        return cls(namespace if namespace is not None else os.environ.get(ENV_NAMESPACE, ""))

    def name(self, base: str) -> str:
        """`base` inside the namespace: the name of a topic or group a user gives without its
        prefix (`replay --topic`, `offsets --group`), as every name below is made."""
        return f"{self.namespace}.{base}" if self.namespace else base

    @property
    def raw_text(self) -> str:
        return self.name("raw.text")

    @property
    def raw_image(self) -> str:
        return self.name("raw.image")

    @property
    def results(self) -> str:
        return self.name("results")

    @property
    def jobs(self) -> str:
        return self.name("jobs")

    @property
    def schedules(self) -> str:
        return self.name("schedules")

    @property
    def schedule_ticks(self) -> str:
        return self.name("schedule.ticks")

    @property
    def notifications(self) -> str:
        """The log of webhook notifications (claims, attempts, deliveries): jobs/notifications/."""
        return self.name("notifications")

    @property
    def dead_letters(self) -> str:
        return self.name("dead.letters")

    @property
    def dlq_replays(self) -> str:
        """The log of `dlq replay` runs (claims and releases): one replay at a time (jobs/dlq_lock.py)."""
        return self.name("dlq.replays")

    def tensors(self, model: str) -> str:
        return self.name(f"tensors.{model}")

    def cache(self, model: str) -> str:
        """The model's results cache: compacted, keyed by the reuse key (reuse/keys.py), each value
        the result as a GPU worker wrote it to results (docs/reuse.md)."""
        return self.name(f"cache.{model}")

    def lane(self, topic: str, priority: Lane) -> str:
        """The `priority` lane of a stage topic (raw_text, raw_image, tensors(model)): the bulk lane
        is the topic itself, the live lane its twin named `live.<topic>` inside the namespace (a
        prefix, not a suffix: a model may be named `x.live`, no stage topic starts with `live.`)."""
        if priority == "bulk":
            return topic
        prefix = f"{self.namespace}." if self.namespace else ""
        assert topic.startswith(prefix), f"{topic!r} is not a topic of namespace {self.namespace!r}"
        return self.name(LIVE_PREFIX + topic[len(prefix) :])

    def lane_of(self, topic: str) -> Lane:
        """The lane of a stage topic of this namespace, told by its name alone."""
        return _lane_of(self.namespace, topic)

    def gpu_group(self, model: str) -> str:
        return self.name(f"gpu.{model}")

    @property
    def preprocess_app_id(self) -> str:
        return self.name("preprocess")


@cache  # asked twice for every record a GPU worker polls, of a handful of topics: ~1 us a call unmade
def _lane_of(namespace: str, topic: str) -> Lane:
    prefix = f"{namespace}." if namespace else ""
    return "live" if topic.startswith(prefix + LIVE_PREFIX) else "bulk"
