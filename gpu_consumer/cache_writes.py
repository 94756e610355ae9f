"""The GPU worker's writes to its model's results cache, cache.<model> (docs/reuse.md).

A successful result of a record that carries REUSE_KEY_ATTRIBUTE (the preprocess worker looked its
key up and missed) is produced to the cache too: key the reuse key's 32 bytes, value the very bytes
produced to results. Dead letters never are. The writes are best effort: a cache record lost costs
a recompute later, never a wrong or lost result, so its delivery is no part of the commit rule, and
a failure to store one is logged once per cause, never raised.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from kafka_io.clients import Producer
from kafka_io.errors import KAFKA_FAULTS
from kafka_io.produce import send
from kafka_io.records import OutRecord
from kafka_io.settings import Topics
from schemas.attributes import REUSE_KEY_ATTRIBUTE

log = logging.getLogger(__name__)

KEY_BYTES = 32
# A record's maps as its bytes hold them (attributes, then stamps): one search tells a record that
# has no reuse key, the hot path's only cost for it.
_MARK = REUSE_KEY_ATTRIBUTE.encode()
_CAUSES_KEPT = 64  # distinct failures remembered, so each is logged once


class Keyed(Protocol):
    """A decoded record as the cache needs it (gpu_consumer.handler.Item)."""

    @property
    def attributes(self) -> Mapping[str, str]: ...

    @property
    def maps(self) -> bytes | None: ...


def reuse_key(attributes: Mapping[str, str]) -> bytes | None:
    """The record's reuse key (its REUSE_KEY_ATTRIBUTE, JSON text of 64 hex digits) as 32 bytes;
    None where it has none, or one that is not a key (nothing is cached under it)."""
    text = attributes.get(REUSE_KEY_ATTRIBUTE)
    if text is None:
        return None
    try:
        # the JSON text of 64 hex digits is they in quotes: read without a JSON parser (~1.5 us)
        quoted = len(text) == 2 * KEY_BYTES + 2 and text[0] == text[-1] == '"'
        key = bytes.fromhex(text[1:-1] if quoted else json.loads(text))
    except (ValueError, TypeError):
        return None
    return key if len(key) == KEY_BYTES else None


class CacheWrites:
    """What one worker writes to cache.<model>, and the failures it has logged."""

    def __init__(self, topics: Topics, model: str) -> None:
        self.topic, self._results = topics.cache(model), topics.results
        self._told: set[str] = set()

    def of(self, items: Sequence[Keyed], produced: Sequence[OutRecord]) -> list[OutRecord]:
        """The cache records of `items` and what was produced for each (in order): one per result
        whose record has a reuse key; none for a dead letter (a result too large to store)."""
        if len(items) != len(produced):
            raise ValueError(f"{len(items)} records and {len(produced)} outputs")
        marked = [n for n, item in enumerate(items) if item.maps is None or _MARK in item.maps]
        cached = []
        for n in marked:
            one = self.one(items[n].attributes, produced[n])
            if one is not None:
                cached.append(one)
        return cached

    def one(self, attributes: Mapping[str, str], produced: OutRecord) -> OutRecord | None:
        """The cache record of one record's `produced` output; None unless it is a result and the
        record has a reuse key."""
        if produced.topic != self._results or produced.value is None:
            return None
        key = reuse_key(attributes)
        return OutRecord(self.topic, produced.value, key) if key is not None else None

    def send(self, producer: Producer, records: Iterable[OutRecord]) -> None:
        """Hand `records` to the producer; whatever becomes of them is logged, never raised."""
        try:
            send(producer, records, _stored, self.failed)
        except KAFKA_FAULTS as exc:  # a producer that turned fatal: the results' own send says so too
            self.failed(f"producing to {self.topic} failed: {exc}")

    def failed(self, reason: str) -> None:
        """A cache record not stored: logged the first time its cause is seen."""
        if reason in self._told:
            return
        if len(self._told) >= _CAUSES_KEPT:
            self._told.clear()
        self._told.add(reason)
        log.warning("results cache: %s; those results are computed again when next asked for", reason)


def _stored() -> None:
    pass
