"""raw.text as tests read it: each Kafka record's records, a pack's (schemas/packs.py) one by one,
so a test asserts on records whether a writer packed them or not."""

from __future__ import annotations

from collections.abc import Iterable

from kafka_io.records import ConsumedRecord
from schemas import RawText, decode
from schemas.packs import kind_of, read_raw_text_pack


def raw_texts_in(messages: Iterable[ConsumedRecord | bytes]) -> list[RawText]:
    """Every RawText the messages (or their values) hold, in order, a pack's in its order."""
    texts: list[RawText] = []
    for msg in messages:
        data = msg if isinstance(msg, bytes) else msg.value
        if kind_of(data) == "RawTextPack":
            pack = read_raw_text_pack(data)
            texts.extend(decode(pack.single(i), RawText) for i in range(len(pack)))
        else:
            texts.append(decode(data, RawText))
    return texts


def record_keys_in(messages: Iterable[ConsumedRecord]) -> list[str]:
    """The job/record key of every record the messages hold."""
    return [f"{t.job_id}/{t.record_id}" for t in raw_texts_in(messages)]
