"""Idempotent topic creation with explicit partition counts.

Auto-creation is never relied on, nor let happen: Kafka may disable it and otherwise gives a topic
its defaults (one partition, a 1 MB record limit, no compaction), and Tansu gives every auto-created
topic 4 partitions, while CreatePartitions is unsupported there, so a topic must be born at its size.
Asking about a topic that does not exist leaves it so (kafka_io/clients.py NO_AUTO_CREATE).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource, NewTopic, ResourceType

from kafka_io.clients import as_refusal, make_admin, unanswered
from kafka_io.errors import BrokerUnavailableError, TopicConfigError
from kafka_io.limits import MAX_RECORD_BYTES
from kafka_io.settings import KafkaSettings
from kafka_io.topology import LANES, Topics

log = logging.getLogger(__name__)

DEFAULT_PARTITIONS = 4

# Kafka's own rules for a topic name (org.apache.kafka.common.internals.Topic): at most 249
# characters of [a-zA-Z0-9._-], and no two topics whose names differ only in '.' against '_'
# (metric names replace '.' with '_', so Kafka refuses the second as colliding with the first).
MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


class TopicRefusedError(TopicConfigError, ValueError):
    """A topic nearline needs cannot be created, for a reason retrying will not change: its name
    collides with an existing topic's, is too long or not legal, or Kafka refused it (a policy).
    `refused`: each refused topic with the reason. A ValueError too: what asked for it (a job's
    model, a schedule's) is at fault, so a scheduler fails that tick instead of retrying it."""

    def __init__(self, refused: dict[str, str]) -> None:
        super().__init__("; ".join(f"topic {name} cannot be created: {why}" for name, why in refused.items()))
        self.refused = refused


def folded(name: str) -> str:
    """A topic name as Kafka compares names for collisions: '.' and '_' are the same."""
    return name.replace(".", "_")


def name_problem(name: str, existing: Iterable[str] = ()) -> str | None:
    """Why Kafka would refuse to create a topic `name` beside the topics `existing`, or None: too
    long, an illegal character, or a name that differs from an existing one only in '.' and '_'.
    Checked here, before Kafka is asked, so every broker (Tansu allows the collision) answers alike."""
    if len(name) > MAX_TOPIC_NAME:
        return f"the name is {len(name)} characters long, over Kafka's limit of {MAX_TOPIC_NAME}"
    if _LEGAL.fullmatch(name) is None:
        return "Kafka takes only letters, digits, '.', '_' and '-' in a topic name"
    twin = next((e for e in existing if e != name and folded(e) == folded(name)), None)
    if twin is not None:
        return f"it collides with the existing topic {twin} (Kafka treats '.' and '_' in topic names as the same)"
    return None


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = DEFAULT_PARTITIONS
    replication_factor: int = 1
    config: tuple[tuple[str, str], ...] = ()


def lanes(topics: Topics, spec: TopicSpec) -> list[TopicSpec]:
    """A stage topic (raw text/image, a model's tensors) in every lane: the live twin is born with
    the batch topic's partitions and config, so the group reading both scales the same on each."""
    return [TopicSpec(topics.lane(spec.name, p), spec.partitions, spec.replication_factor, spec.config) for p in LANES]


def model_topics_problem(topics: Topics, model: str) -> str | None:
    """Why Kafka could not hold the tensors topics of a model named `model` in `topics`' namespace
    (name_problem: too long, an illegal character), or None."""
    for name in (topics.lane(topics.tensors(model), p) for p in LANES):
        problem = name_problem(name)
        if problem is not None:
            return f"its topic {name} cannot be created: {problem}"
    return None


def jobs_topic(topics: Topics) -> TopicSpec:
    """The job registry: one partition (one order of events per job), compacted where Kafka compacts."""
    return _table(topics.jobs)


def schedules_topic(topics: Topics) -> TopicSpec:
    """Schedule specs, last value per name: like the job registry."""
    return _table(topics.schedules)


def _table(name: str) -> TopicSpec:
    """A keyed table (kafka_io/tables.py): one partition, compacted."""
    return TopicSpec(name, partitions=1, config=(("cleanup.policy", "compact"),))


def schedule_ticks_topic(topics: Topics) -> TopicSpec:
    """Schedulers' claims on ticks. One partition, so every scheduler reads the claims in one order and
    agrees which came first. Compacted per schedule@tick so it stays small, but only after a day:
    the competing claims of a tick must all be readable while schedulers still decide on it."""
    return TopicSpec(
        topics.schedule_ticks,
        partitions=1,
        config=(("cleanup.policy", "compact"), ("min.compaction.lag.ms", str(24 * 3600 * 1000))),
    )


def notifications_topic(topics: Topics) -> TopicSpec:
    """Notifier workers' claims on job notifications and their outcomes. One partition, so every
    notifier reads them in one order and agrees which claim came first. Compacted per key (the
    final record of a notification has a key of its own, so it outlives the rest), but only after
    a week: every record of a notification still being retried must stay readable."""
    return TopicSpec(
        topics.notifications,
        partitions=1,
        config=(("cleanup.policy", "compact"), ("min.compaction.lag.ms", str(7 * 24 * 3600 * 1000))),
    )


def ensure_topics(settings: KafkaSettings, specs: list[TopicSpec], timeout_s: float = 15.0) -> None:
    """Create the topics that do not exist yet; existing ones are left as they are, but must take
    records as large as the limit (TopicConfigError otherwise, before anything is produced).
    TopicRefusedError for topics that cannot be created (name_problem, or Kafka's refusal); a
    refusal for want of a permission is raised as the client raised it, for the caller that
    reports authorization failures to say so."""
    refused, denied = _ensure(settings, specs, timeout_s)
    if denied is not None:
        raise denied
    if refused:
        raise TopicRefusedError(refused)


def try_ensure_topics(settings: KafkaSettings, specs: list[TopicSpec], timeout_s: float = 15.0) -> dict[str, str]:
    """ensure_topics for a worker that goes on without the topics it cannot have: each topic that
    cannot be created (a collision, a name too long, no Create permission, a policy) with the
    reason, the others created. A broker that does not answer still raises (a fault, not a refusal)."""
    refused, _ = _ensure(settings, specs, timeout_s)
    return refused


# Answers to CreateTopics that say the broker was not reached or not ready: a fault to retry
# (the caller fails and is restarted), never a refusal to pass on to the records.
_TRANSIENT = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._DESTROY,
        KafkaError._RESOLVE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_CONTROLLER,
    }
)
_DENIED = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED})


def _ensure(
    settings: KafkaSettings, specs: list[TopicSpec], timeout_s: float
) -> tuple[dict[str, str], Exception | None]:
    """Create the missing topics: (the refused ones with the reason, the client's exception of a
    refusal for want of a permission, if any)."""
    admin = make_admin(settings)
    existing = set(_metadata(settings, admin, None, timeout_s).topics)
    check_record_limit(settings, admin, sorted({s.name for s in specs} & existing), timeout_s)
    refused: dict[str, str] = {}
    # one spec per name: a CreateTopics request naming a topic twice is malformed
    missing: list[TopicSpec] = []
    for s in {s.name: s for s in reversed(specs) if s.name not in existing}.values():
        problem = name_problem(s.name, [*existing, *(m.name for m in missing)])
        if problem is None:
            missing.append(s)
        else:
            refused[s.name] = problem
    if not missing:
        return refused, None
    # The record limit is set, not inherited: Kafka's default (~1 MB) would refuse images that
    # every producer here was told may travel (kafka_io/limits.py).
    futures = admin.create_topics(
        [
            NewTopic(
                s.name,
                s.partitions,
                s.replication_factor,
                config={"max.message.bytes": str(MAX_RECORD_BYTES), **dict(s.config)},
            )
            for s in missing
        ],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    denied: Exception | None = None
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:  # a concurrent creator won
                continue
            if error.code() in _TRANSIENT or error.retriable():
                raise
            refused[name] = f"Kafka refused it: {error.str()} ({error.name()})"
            if error.code() in _DENIED:
                denied = as_refusal(exc, "Create", name) or exc
    served = [s.name for s in missing if s.name not in refused]
    if served:
        _wait_until_served(settings, admin, served, timeout_s)
    return refused, denied


def _wait_until_served(settings: KafkaSettings, admin: AdminClient, names: list[str], timeout_s: float) -> None:
    """Return once the broker's metadata shows every topic with a leader for each partition. Kafka
    (KRaft) answers CreateTopics before its brokers serve the new topic: a consumer that subscribed
    in between was told the topic does not exist, and faust's then ignored it until its next
    metadata refresh (minutes): a preprocess worker sat idle beside a submitted job."""
    deadline = time.monotonic() + timeout_s
    while True:
        topics = _metadata(settings, admin, None, timeout_s).topics
        if all(
            name in topics
            and topics[name].error is None
            and topics[name].partitions
            and all(p.leader >= 0 for p in topics[name].partitions.values())
            for name in names
        ):
            return
        if time.monotonic() >= deadline:
            log.warning(
                "Kafka at %s does not serve %s yet, %.0f s after creating them",
                settings.bootstrap_servers,
                names,
                timeout_s,
            )
            return
        time.sleep(0.05)


def check_record_limit(settings: KafkaSettings, admin: AdminClient, names: list[str], timeout_s: float) -> None:
    """Existing topics must accept MAX_RECORD_BYTES: a topic created by someone else with Kafka's
    default (~1 MB) would refuse a large image or result at produce time, on every redelivery."""
    if not names:
        return
    futures = admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, name) for name in names], request_timeout=timeout_s
    )
    low = []
    for resource, future in futures.items():
        try:
            entry = future.result().get("max.message.bytes")
        except KafkaException as exc:
            if (refused := as_refusal(exc, "DescribeConfigs", resource.name)) is not None:
                raise refused from None
            raise BrokerUnavailableError(
                f"Kafka at {settings.bootstrap_servers} did not describe topic {resource.name}: {exc.args[0]}"
            ) from None
        # Tansu lists only the settings a topic was created with, and enforces no limit when unset
        if entry is not None and entry.value is not None and int(entry.value) < MAX_RECORD_BYTES:
            low.append(f"{resource.name} ({int(entry.value):,})")
    if low:
        raise TopicConfigError(
            f"topic(s) {', '.join(sorted(low))} take records of at most that many bytes, under nearline's "
            f"record limit of {MAX_RECORD_BYTES:,}: raise it, e.g. kafka-configs.sh --alter --entity-type topics "
            f"--entity-name TOPIC --add-config max.message.bytes={MAX_RECORD_BYTES}"
        )


def topic_names(settings: KafkaSettings, timeout_s: float = 10.0) -> list[str]:
    """Every topic the cluster holds, sorted."""
    return sorted(_metadata(settings, make_admin(settings), None, timeout_s).topics)


def partitions_of(
    settings: KafkaSettings, topic: str, timeout_s: float = 10.0, *, consumer: Consumer | None = None
) -> list[int]:
    """The topic's partitions; none when it does not exist, which asking never changes (no client
    here lets a broker auto-create a topic: kafka_io/clients.py NO_AUTO_CREATE).

    `consumer`: asked through the consumer that will read them, so it knows each partition's
    leader before it assigns them. One that assigns a logical offset (the beginning, the group's
    committed offset) before it has seen that metadata retries the offset lookup on librdkafka's
    fixed 500 ms timer: every table read, and every follower, started half a second late."""
    meta = _metadata(settings, consumer if consumer is not None else make_admin(settings), topic, timeout_s)
    t = meta.topics.get(topic)
    if t is not None and t.error is not None and (refused := as_refusal(t.error, "Describe", topic)) is not None:
        raise refused  # not "no such topic": Kafka says that of every topic a principal may not see
    if t is None or t.error is not None:
        return []
    return sorted(t.partitions)


def _metadata(
    settings: KafkaSettings, client: AdminClient | Consumer, topic: str | None, timeout_s: float
) -> ClusterMetadata:
    try:
        return client.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        raise unanswered(settings, f"did not answer within {timeout_s:.0f} s", exc) from None
