"""`nearline replay` and `nearline offsets`: records by offset or time, as JSON lines; group offsets."""

from __future__ import annotations

import base64
import difflib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from kafka_io.offsets import end_offsets, offsets_at_time
from kafka_io.reading import read_range
from kafka_io.records import ConsumedRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import partitions_of, topic_names
from schemas import SerdeError
from schemas.packs import RAW_TEXT_PACK, TENSOR_PACK, kind_of, unpacked
from schemas.serde import decode_any


class ReplaySpecError(ValueError):
    """A replay or offset reset that names no start (or two), or a time that is not one: a usage
    error, said before anything is read or moved."""


class UnknownTopicError(ReplaySpecError):
    """A command that only reads or moves offsets named a topic the cluster does not have."""


def namespace_hint(namespace: str, given: str) -> str:
    """What to say where a name given inside a namespace already carried its prefix: operators
    typed whole names while --namespace was ignored, and one now finds no `ns.ns.results`."""
    prefix = f"{namespace}."
    if namespace and given.startswith(prefix):
        return f"; --namespace {namespace} prefixes every name given: give {given.removeprefix(prefix)!r}"
    return ""


def require_topic(settings: KafkaSettings, topic: str, shown: int = 20, hint: str = "") -> None:
    """UnknownTopicError, naming the topics that exist (the closest names first), unless `topic`
    exists. Asked before any read: reading a missing topic would create it where the broker
    auto-creates topics, and a typo would leave an empty topic behind and report "0 records"."""
    names = [n for n in topic_names(settings) if not n.startswith("__")]  # Kafka's internal topics
    if topic in names:
        return
    # Kafka lists only the topics a principal may describe: asked by name, it says which it may
    # not (KafkaAuthorizationError), where the listing alone would read as "no topic"
    partitions_of(settings, topic)
    close = difflib.get_close_matches(topic, names, n=5, cutoff=0.6)
    listed = [*close, *(n for n in names if n not in close)]
    more = f" and {len(listed) - shown} more" if len(listed) > shown else ""
    there = f"its topics, closest first: {', '.join(listed[:shown])}{more}" if listed else "it has no topics"
    raise UnknownTopicError(
        f"no topic {topic!r} at {settings.bootstrap_servers} (nothing was read or created); {there}{hint}"
    )


class UnknownGroupError(ReplaySpecError):
    """`offsets show/reset` named a consumer group the cluster does not know."""


def require_group(settings: KafkaSettings, group: str, shown: int = 20, hint: str = "") -> None:
    """UnknownGroupError, naming the groups that exist (the closest names first), unless `group`
    has committed offsets or live members. `offsets show --group nosuch` printed lag as if the
    group existed, and `offsets reset --group nosuch` created it."""
    from kafka_io.groups import group_names, live_groups

    names = group_names(settings)
    if group in names or live_groups(settings, [group]):
        return
    close = difflib.get_close_matches(group, names, n=5, cutoff=0.6)
    listed = [*close, *(n for n in names if n not in close)]
    more = f" and {len(listed) - shown} more" if len(listed) > shown else ""
    there = f"its groups, closest first: {', '.join(listed[:shown])}{more}" if listed else "it has no consumer groups"
    raise UnknownGroupError(
        f"no consumer group {group!r} at {settings.bootstrap_servers} with committed offsets or members "
        f"(nothing was read or changed); {there}{hint}"
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time_ms(text: str) -> int:
    """ISO 8601 (a naive time is local time) to whole milliseconds since the epoch, rounded down;
    negative before 1970 (kafka_io.offsets takes such a time as the start of each partition)."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ReplaySpecError(f"{text!r} is not an ISO 8601 time (e.g. 2026-11-29T18:00:00Z)") from None
    if when.tzinfo is None:
        try:
            when = when.astimezone()  # the local time zone of that date
        except (ValueError, OverflowError, OSError):  # a date at the calendar's ends, in no known zone
            raise ReplaySpecError(f"{text!r}: give its time zone (e.g. {text}Z for UTC)") from None
    return (when - _EPOCH) // timedelta(milliseconds=1)  # exact: a float's seconds lose microseconds


def plain(value: Any) -> Any:
    """A decoded record as JSON: bytes as their length and base64, tensors without their data."""
    if isinstance(value, bytes):
        return {"bytes": len(value), "base64": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        if {"dtype", "shape", "data"} <= value.keys():
            return {
                "name": value["name"],
                "dtype": value["dtype"],
                "shape": value["shape"],
                "bytes": len(value["data"]),
            }
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def message_json(msg: ConsumedRecord) -> dict[str, Any]:
    value = msg.value
    line: dict[str, Any] = {
        "topic": msg.topic,
        "partition": msg.partition,
        "offset": msg.offset,
        "timestamp_ms": msg.timestamp_ms,
        "key": msg.key_text or None,
    }
    try:
        kind = kind_of(value)
        if kind is None:
            record = decode_any(value)
            line["type"] = record.SCHEMA
            line["record"] = plain(record.to_avro())
        else:  # a pack (schemas/packs.py): each of its records as one would be on its own
            line["type"] = RAW_TEXT_PACK if kind == "RawTextPack" else TENSOR_PACK
            line["records"] = [plain(decode_any(single).to_avro()) for single in unpacked(value)]
    except SerdeError as exc:
        line["type"] = None
        line["error"] = str(exc)
        line["value"] = plain(value)
    return line


def replay_messages(
    settings: KafkaSettings,
    topic: str,
    *,
    partition: int | None = None,
    from_offset: int | None = None,
    from_time: str | None = None,
    to_offset: int | None = None,
    to_time: str | None = None,
    hint: str = "",
) -> Iterator[ConsumedRecord]:
    if (from_offset is None) == (from_time is None):
        raise ReplaySpecError("give exactly one of --from-offset and --from-time")
    from_ms = parse_time_ms(from_time) if from_time else None
    to_ms = parse_time_ms(to_time) if to_time else None
    require_topic(settings, topic, hint=hint)
    ends = end_offsets(settings, topic)
    if partition is not None and partition not in ends:
        raise ReplaySpecError(f"{topic} has no partition {partition}: its partitions are 0-{len(ends) - 1}")
    partitions = [partition] if partition is not None else sorted(ends)
    if from_ms is not None:
        at = offsets_at_time(settings, topic, from_ms, ends)
        start = {p: at[p] for p in partitions}
    else:
        start = dict.fromkeys(partitions, from_offset or 0)
    # A partition is read only if it has a record in the range: a consumer assigned past a
    # partition's end gets no end-of-partition event, and the read would wait out its idle timeout.
    start = {p: o for p, o in start.items() if o < ends[p] and (to_offset is None or o < to_offset)}
    return read_range(
        settings,
        topic,
        start,
        stop_offset=to_offset,
        from_ms=from_ms,
        to_ms=to_ms,
    )


def reset_targets(
    settings: KafkaSettings,
    topic: str,
    *,
    to: str | None = None,
    to_offset: int | None = None,
    to_time: str | None = None,
    hint: str = "",
) -> dict[int, int]:
    """Where `offsets reset` moves a group on each partition: to="earliest" or "latest", an
    offset (capped at each partition's end) or the first record at or after an ISO 8601 time."""
    if sum(x is not None for x in (to, to_offset, to_time)) != 1:
        raise ReplaySpecError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime")
    at_ms = parse_time_ms(str(to_time)) if to_time is not None else None
    require_topic(settings, topic, hint=hint)
    ends = end_offsets(settings, topic)
    if to == "earliest":
        return dict.fromkeys(ends, 0)
    if to == "latest":
        return ends
    if to_offset is not None:
        return {p: min(to_offset, end) for p, end in ends.items()}
    assert at_ms is not None
    return offsets_at_time(settings, topic, at_ms, ends)
