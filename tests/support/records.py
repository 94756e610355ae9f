"""A record's key and value as bytes, for tests that read records they know carry both (a
tombstone, the one record without a value, would fail here by name rather than in decode)."""

from __future__ import annotations

from kafka_io.reading import read_topics
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import KafkaSettings


def value(record: OutRecord | ConsumedRecord) -> bytes:
    assert record.value is not None, f"{record.topic}: a tombstone where a record was expected"
    return record.value


def key(record: OutRecord | ConsumedRecord) -> str:
    assert record.key is not None, f"{record.topic}: a record without a key"
    return record.key.decode()


def copies_of(settings: KafkaSettings, topic: str) -> dict[str, int]:
    """How many times each key is in the topic, as a read_committed reader sees it (not deduplicated)."""
    copies: dict[str, int] = {}
    for msg in read_topics(settings, [topic]):
        copies[key(msg)] = copies.get(key(msg), 0) + 1
    return copies
