"""Keyed tables kept in compacted topics (jobs, schedules): write a row, read the latest rows.

Readers fold the log themselves, last value per key wins and a tombstone (null value) deletes,
so they are right on a broker that never compacts (Tansu) and on one that has not compacted yet.
"""

from __future__ import annotations

from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from schemas import SerdeError, decode
from schemas.serde import R


def put_row(settings: KafkaSettings, table: TopicSpec, key: str, value: bytes | None) -> None:
    """Write one row and wait until the broker has it; value None deletes the key."""
    ensure_topics(settings, [table])
    # Not idempotent: a fresh idempotent producer sends nothing for 0.5-1 s (kafka_io/clients.py),
    # which was most of `nearline submit`'s time. Its one record is the only one in flight, so a
    # retry can only write the same row twice, and readers keep the last value per key.
    producer = make_producer(settings.with_client_id(f"table-{table.name}"), idempotent=False)
    produce_all(producer, [OutRecord(table.name, value, key.encode())])


def read_rows(settings: KafkaSettings, table: TopicSpec) -> dict[str, bytes]:
    """The table as it stands now: key -> latest value, deleted keys left out. A table never
    written has no rows, and is not created here: put_row creates it, as it is specified."""
    rows: dict[str, bytes] = {}
    for msg in read_topics(settings, [table.name]):
        if msg.deleted:
            rows.pop(msg.key_text, None)
        else:
            rows[msg.key_text] = msg.value
    return rows


def read_records(settings: KafkaSettings, table: TopicSpec, cls: type[R]) -> dict[str, R]:
    """The table's rows decoded as `cls`; a row that is not one is skipped, not allowed to hide the rest."""
    out: dict[str, R] = {}
    for key, value in read_rows(settings, table).items():
        try:
            out[key] = decode(value, cls)
        except SerdeError:
            continue
    return out
