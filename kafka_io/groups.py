"""Whether consumer groups have live members, from the group state the coordinator reports, and
how far they committed.

Tansu's describe_consumer_groups lists no members ever, but its STABLE/EMPTY state is right
(docs/brokers.md), and on Kafka the state means the same: so liveness reads the state.

Both questions are coordinator-targeted admin requests, which librdkafka may answer by aborting
the process after an outage: they are asked from a child process (kafka_io/group_probe.py), one
per settings for this process's life, shared by its callers."""

from __future__ import annotations

import atexit
import json
import threading
from dataclasses import asdict

from confluent_kafka import ConsumerGroupState, KafkaException

from kafka_io.clients import make_admin
from kafka_io.group_probe import RESOLVE_MARGIN_S, GroupProbe
from kafka_io.settings import KafkaSettings

_LIVE = {
    ConsumerGroupState.STABLE.name,
    ConsumerGroupState.PREPARING_REBALANCING.name,
    ConsumerGroupState.COMPLETING_REBALANCING.name,
}


def live_groups(settings: KafkaSettings, groups: list[str], timeout_s: float = 5.0) -> set[str]:
    """The groups among `groups` that have at least one member now; an unanswered query counts as none."""
    return answered_live_groups(settings, groups, timeout_s) or set()


def answered_live_groups(settings: KafkaSettings, groups: list[str], timeout_s: float = 5.0) -> set[str] | None:
    """live_groups, but None when the cluster answered for none of them (down, unreachable): a
    watchdog must not read an outage as workers gone."""
    reply = _probe(settings).ask({"states": groups, "timeout_s": timeout_s}, timeout_s + RESOLVE_MARGIN_S)
    states: dict[str, str] | None = None if reply is None else reply["states"]
    return None if not states else {group for group, state in states.items() if state in _LIVE}


def committed_total(settings: KafkaSettings, group: str, timeout_s: float = 5.0) -> int | None:
    """The sum of the group's committed offsets over every partition it committed (0 for none);
    None when the cluster does not answer. A group whose total moves is working, whatever its
    state says: Tansu reports a group STABLE, with no member list, for a while after its only
    member was SIGKILLed, so a watchdog going by state alone waited on a dead stage."""
    reply = _probe(settings).ask({"committed": group, "timeout_s": timeout_s}, timeout_s + RESOLVE_MARGIN_S)
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
