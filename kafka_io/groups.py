"""Whether consumer groups have live members, from the group state the coordinator reports.

Tansu's describe_consumer_groups lists no members ever, but its STABLE/EMPTY state is right
(docs/brokers.md), and on Kafka the state means the same: so liveness reads the state."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import AdminClient

from kafka_io.clients import as_refusal, make_admin
from kafka_io.settings import KafkaSettings

_LIVE = {
    ConsumerGroupState.STABLE,
    ConsumerGroupState.PREPARING_REBALANCING,
    ConsumerGroupState.COMPLETING_REBALANCING,
}

# past the request timeout, by which librdkafka fails the request itself
_RESOLVE_MARGIN_S = 5.0


def live_groups(settings: KafkaSettings, groups: list[str], timeout_s: float = 5.0) -> set[str]:
    """The groups among `groups` that have at least one member now; an unanswered query counts as none."""
    return answered_live_groups(settings, groups, timeout_s) or set()


def answered_live_groups(
    settings: KafkaSettings, groups: list[str], timeout_s: float = 5.0, *, admin: AdminClient | None = None
) -> set[str] | None:
    """live_groups, but None when the cluster answered for none of them (down, unreachable): a
    watchdog must not read an outage as workers gone.

    `admin`: a client (make_admin) that a caller asking again and again holds for all its asks.
    Each answer is awaited until librdkafka itself resolves it (at timeout_s), never given up on
    first."""
    admin = admin or make_admin(settings)  # held until the futures resolve: a collected client never answers them
    try:
        # Only a broker that answers now is asked about groups: describe_consumer_groups requests
        # left unanswered by a frozen broker aborted the process (a librdkafka assertion,
        # rd_kafka_enq_once_del_source_return) about a minute in; a metadata request just times out.
        admin.list_topics(timeout=timeout_s)
    except KafkaException:
        return None
    futures = admin.describe_consumer_groups(groups, request_timeout=timeout_s)
    live, answered = set(), False
    for group, future in futures.items():
        try:
            state = future.result(timeout=timeout_s + _RESOLVE_MARGIN_S).state
        except KafkaException as exc:
            if (refused := as_refusal(exc, "Describe", group)) is not None:
                raise refused from None  # not "no members": the principal may not see the group
            continue
        except TimeoutError:
            continue
        answered = True
        if state in _LIVE:
            live.add(group)
    return live if answered else None


def group_names(settings: KafkaSettings, prefix: str = "", timeout_s: float = 5.0) -> list[str]:
    """The consumer groups the cluster knows whose names start with prefix, sorted; none if it
    does not answer (a hint's source, never a decision's). Tansu lists only groups that have
    committed offsets, Kafka every group."""
    admin = make_admin(settings)  # held until the future resolves, as in answered_live_groups
    try:
        listing = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s)
    except (KafkaException, TimeoutError):
        return []
    return sorted(g.group_id for g in listing.valid if g.group_id.startswith(prefix))


def committed_total(
    settings: KafkaSettings, group: str, timeout_s: float = 5.0, *, admin: AdminClient | None = None
) -> int | None:
    """The sum of the group's committed offsets over every partition it committed (0 for none);
    None when the cluster does not answer. A group whose total moves is working, whatever its
    state says: Tansu reports a group STABLE, with no member list, for a while after its only
    member was SIGKILLed, so a watchdog going by state alone waited on a dead stage."""
    admin = admin or make_admin(settings)  # held until the future resolves, as in answered_live_groups
    try:
        admin.list_topics(timeout=timeout_s)  # only a broker that answers now is asked (see answered_live_groups)
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s)
        listing = futures[group].result(timeout=timeout_s + _RESOLVE_MARGIN_S)
    except (KafkaException, TimeoutError):
        return None
    return sum(max(tp.offset, 0) for tp in listing.topic_partitions or [])
