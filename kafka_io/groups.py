"""Whether consumer groups have live members, from the group state the coordinator reports, and
how far they committed.

Tansu's describe_consumer_groups lists no members ever, but its STABLE/EMPTY state is right
(docs/brokers.md), and on Kafka the state means the same: so liveness reads the state.

Both questions are coordinator-targeted admin requests, which librdkafka may answer by aborting
the process after an outage: they are asked from a child process (kafka_io/group_probe.py), one per
probe per settings for this process's life, shared by its callers."""

from __future__ import annotations

import atexit
import json
import threading
from dataclasses import asdict
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import AdminClient

from kafka_io.clients import as_refusal, make_admin
from kafka_io.group_probe import GroupProbe
from kafka_io.settings import KafkaSettings

_LIVE = {
    ConsumerGroupState.STABLE.name,
    ConsumerGroupState.PREPARING_REBALANCING.name,
    ConsumerGroupState.COMPLETING_REBALANCING.name,
}

# past the request timeout, by which librdkafka fails the request itself
_RESOLVE_MARGIN_S = 5.0


def live_groups(settings: KafkaSettings, groups: list[str], timeout_s: float = 5.0) -> set[str]:
    """The groups among `groups` that have at least one member now; an unanswered query counts as none."""
    return answered_live_groups(settings, groups, timeout_s) or set()


def answered_live_groups(settings: KafkaSettings, groups: list[str], timeout_s: float = 5.0) -> set[str] | None:
    """live_groups, but None when the cluster answered for none of them (down, unreachable): a
    watchdog must not read an outage as workers gone."""
    reply = _probe(settings).ask({"states": groups, "timeout_s": timeout_s}, timeout_s + _RESOLVE_MARGIN_S)
    states: dict[str, str] | None = None if reply is None else reply["states"]
    return None if not states else {group for group, state in states.items() if state in _LIVE}


def committed_total(settings: KafkaSettings, group: str, timeout_s: float = 5.0) -> int | None:
    """The sum of the group's committed offsets over every partition it committed (0 for none);
    None when the cluster does not answer. A group whose total moves is working, whatever its
    state says: Tansu reports a group STABLE, with no member list, for a while after its only
    member was SIGKILLed, so a watchdog going by state alone waited on a dead stage."""
    reply = _probe(settings).ask({"committed": group, "timeout_s": timeout_s}, timeout_s + _RESOLVE_MARGIN_S)
    return None if reply is None else reply["total"]


def group_names(settings: KafkaSettings, prefix: str = "", timeout_s: float = 5.0) -> list[str]:
    """The consumer groups the cluster knows whose names start with prefix, sorted; none if it
    does not answer (a hint's source, never a decision's). Tansu lists only groups that have
    committed offsets, Kafka every group. ListConsumerGroups is not coordinator-targeted: asked here."""
    admin = make_admin(settings)  # held until the future resolves: a collected client never answers it
    try:
        listing = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s)
    except (KafkaException, TimeoutError):
        return []
    return sorted(g.group_id for g in listing.valid if g.group_id.startswith(prefix))


def answer(admin: AdminClient, question: dict[str, Any]) -> dict[str, Any]:
    """The child's side (kafka_io.group_probe.serve): a question's answer, in JSON's types."""
    timeout_s = float(question["timeout_s"])
    if "states" in question:
        states = _states(admin, question["states"], timeout_s)
        return {"states": states, "answered": bool(states)}
    total = _committed(admin, question["committed"], timeout_s)
    return {"total": total, "answered": total is not None}


def _states(admin: AdminClient, groups: list[str], timeout_s: float) -> dict[str, str]:
    """Each answered group's state by name; a group the cluster did not answer for is left out."""
    states = {}
    for group, future in admin.describe_consumer_groups(groups, request_timeout=timeout_s).items():
        try:
            states[group] = future.result(timeout=timeout_s + _RESOLVE_MARGIN_S).state.name
        except KafkaException as exc:
            if (refused := as_refusal(exc, "Describe", group)) is not None:
                raise refused from None  # not "no members": the principal may not see the group
        except TimeoutError:
            pass
    return states


def _committed(admin: AdminClient, group: str, timeout_s: float) -> int | None:
    try:
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s)
        listing = futures[group].result(timeout=timeout_s + _RESOLVE_MARGIN_S)
    except (KafkaException, TimeoutError):
        return None
    return sum(max(tp.offset, 0) for tp in listing.topic_partitions or [])


_probes: dict[str, GroupProbe] = {}
_probes_lock = threading.Lock()


def _probe(settings: KafkaSettings) -> GroupProbe:
    key = json.dumps(asdict(settings), sort_keys=True)
    with _probes_lock:
        if not _probes:
            atexit.register(_close_shared)
        return _probes.setdefault(key, GroupProbe(settings))


def _close_shared() -> None:
    with _probes_lock:
        for probe in _probes.values():
            probe.close()
        _probes.clear()
