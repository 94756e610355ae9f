"""Whether consumer groups have live members, from the group state the coordinator reports.

Tansu's describe_consumer_groups lists no members ever, but its STABLE/EMPTY state is right
(shared/docs/tansu.md), and on Kafka the state means the same: so liveness reads the state."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupState, KafkaException

from kafka_io.clients import make_admin
from kafka_io.settings import KafkaSettings

_LIVE = {
    ConsumerGroupState.STABLE,
    ConsumerGroupState.PREPARING_REBALANCING,
    ConsumerGroupState.COMPLETING_REBALANCING,
}


def live_groups(settings: KafkaSettings, groups: list[str], timeout_s: float = 5.0) -> set[str]:
    """The groups among `groups` that have at least one member now; an unanswered query counts as none."""
    admin = make_admin(settings)  # held until the futures resolve: a collected client never answers them
    futures = admin.describe_consumer_groups(groups, request_timeout=timeout_s)
    live = set()
    for group, future in futures.items():
        try:
            if future.result(timeout=timeout_s).state in _LIVE:
                live.add(group)
        except (KafkaException, TimeoutError):
            continue
    return live


def group_names(settings: KafkaSettings, prefix: str = "", timeout_s: float = 5.0) -> list[str]:
    """The consumer groups the cluster knows whose names start with prefix, sorted; none if it
    does not answer (a hint's source, never a decision's). Tansu lists only groups that have
    committed offsets, Kafka every group."""
    admin = make_admin(settings)  # held until the future resolves, as in live_groups
    try:
        listing = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s)
    except (KafkaException, TimeoutError):
        return []
    return sorted(g.group_id for g in listing.valid if g.group_id.startswith(prefix))
