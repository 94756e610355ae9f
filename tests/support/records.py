"""A record's key and value as bytes, for tests that read records they know carry both (a
tombstone, the one record without a value, would fail here by name rather than in decode); and
the records of raw.text and of a tensor topic, whether their Kafka records are packs or single
records (#41)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kafka_io.reading import read_topics
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import KafkaSettings
from schemas import RawText, TensorRecord, decode
from schemas.packs import kind_of, read_tensor_pack, unpacked


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


@dataclass(frozen=True)
class TensorRow:
    """One record of a tensor topic: a record of a TensorPack, or a single TensorRecord."""

    job_id: str
    record_id: str
    ids: np.ndarray  # its (first) tensor, as written: token ids before padding

    @property
    def key(self) -> str:
        """job/record, as results and dead letters are keyed (a pack's Kafka key names its first record only)."""
        return f"{self.job_id}/{self.record_id}"


def tensor_rows_of(record: ConsumedRecord) -> list[TensorRow]:
    """The records one Kafka record of a tensor topic holds. A pack's `records` header must count
    them (the GPU worker's windows and the lag count by it), so a wrong header fails here."""
    data = value(record)
    if kind_of(data) == "TensorPack":
        pack = read_tensor_pack(data)
        where = f"{record.topic}[{record.partition}]@{record.offset}"
        assert record.records == len(pack), f"{where}: `records` header {record.records}, pack of {len(pack)}"
        return [TensorRow(pack.job_id, rid, pack.array(i)) for i, rid in enumerate(pack.record_ids)]
    single = decode(data, TensorRecord)
    return [TensorRow(single.job_id, single.record_id, single.tensors[0].to_array())]


def tensor_rows(settings: KafkaSettings, topic: str) -> list[TensorRow]:
    """Every record in a tensor topic, packed or single, in topic order; copies counted each time."""
    return [row for msg in read_topics(settings, [topic]) for row in tensor_rows_of(msg)]


def raw_texts_in(messages: Iterable[ConsumedRecord | bytes]) -> list[RawText]:
    """Every RawText the messages (or their values) hold, in order, a pack's in its order."""
    values = (msg if isinstance(msg, bytes) else msg.value for msg in messages)
    return [decode(single, RawText) for data in values for single in unpacked(data)]


def record_keys_in(messages: Iterable[ConsumedRecord]) -> list[str]:
    """The job/record key of every record the messages hold."""
    return [f"{t.job_id}/{t.record_id}" for t in raw_texts_in(messages)]
