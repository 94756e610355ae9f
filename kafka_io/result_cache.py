"""The results cache's read side at the Kafka edge: the compacted topic cache.<model> (its spec),
and a tail that keeps a local store (reuse/store.py ResultStore) equal to what the topic holds, and
the engine whose keys a lookup asks for (`runtime`: the topic's RUNTIME_RECORD_KEY record).

The tail reads every partition from the beginning by assign() (no group, no commits) on a daemon
thread of its own, then follows new records (into the store in batches, FOLLOW_APPLY_S behind at
most). Its faults are the cache's, never the caller's: a lookup that the store cannot answer is a
miss, and a miss is computed. So it never raises to its caller and never holds the process up;
`loaded(timeout_s)` is the only wait:
- the topic missing: a warning naming it, and a look again every `recheck_s`, so that a topic
  created later is tailed;
- the topic deleted, or cut below what was read (retention, or deleted and made again): a warning,
  the store emptied and the topic read again from the beginning;
- the broker down or refusing: a warning, and tries again every `recheck_s`.

"Loaded" is each partition's end-of-partition event, not a watermark asked for: on Kafka the two
agree, but Tansu answers ListOffsets(latest) with the start of the last batch + 1
(shared/docs/tansu.md), where its fetches' end is exact. The consumer is made after start(), so
each end it reports is at or past the end the partition had when the tail started.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from kafka_io.clients import make_consumer
from kafka_io.events import consume_ready, key_value, take
from kafka_io.reading import READER_GROUP_PREFIX
from kafka_io.records import RUNTIME_RECORD_KEY
from kafka_io.settings import KafkaSettings
from kafka_io.topics import DEFAULT_PARTITIONS, TopicSpec, partitions_of
from kafka_io.topology import Topics

log = logging.getLogger(__name__)

KEY_SIZE = 32  # a reuse key's bytes (reuse/keys.py); a record keyed otherwise is not a cache entry
RECHECK_S = 5.0
METADATA_TIMEOUT_S = 5.0
POLL_S = 0.2
BATCH = 1000
# Once loaded, what the tail reads goes into the store in batches of up to BATCH, at most this long
# after its first record was read: a fetch brings 100-200 results while a job runs, and the store
# takes a batch of 1,000 at half their cost a record (bench.reuse_index). So a result can be found
# up to this long after it was read: a job submitted sooner than that after another with the same
# content computes the last of them again, as two jobs at once do.
FOLLOW_APPLY_S = 0.1
# Where librdkafka would move a consumer whose offset left the log (retention, a topic made again)
# to the beginning by itself and read on, "error" makes that an event, so the store is emptied first.
TAIL_CONSUMER: dict[str, object] = {"auto.offset.reset": "error"}
_OUT_OF_RANGE = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})
_GONE = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION})


class CacheStore(Protocol):
    """What the tail writes to (reuse/store.py ResultStore)."""

    def put_many(self, entries: Sequence[tuple[bytes, bytes | None]]) -> None: ...

    def clear(self) -> None: ...


def cache_topic(
    topics: Topics, model: str, retention_ms: int | None = None, retention_bytes: int | None = None
) -> TopicSpec:
    """The model's results cache: compacted (one result a key); with a retention (time, or bytes a
    partition) also deleted past it, the operator's bound on its size."""
    config: list[tuple[str, str]] = []
    if retention_ms is not None:
        config.append(("retention.ms", str(retention_ms)))
    if retention_bytes is not None:
        config.append(("retention.bytes", str(retention_bytes)))
    policy = "compact,delete" if config else "compact"
    return TopicSpec(topics.cache(model), DEFAULT_PARTITIONS, config=(("cleanup.policy", policy), *config))


class _Rebuild(Exception):
    """The topic no longer holds what was read: empty the store and read it again."""


class CacheTail:
    """cache.<model> followed into a store, on a daemon thread (module docstring): start, loaded, close."""

    def __init__(
        self, settings: KafkaSettings, topics: Topics, model: str, store: CacheStore, recheck_s: float = RECHECK_S
    ) -> None:
        self.topic = topics.cache(model)
        self._settings = settings.with_client_id(f"cache-tail-{model}")
        self._store = store
        self._recheck_s = recheck_s
        self._stop = threading.Event()
        self._loaded = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"cache-tail-{model}", daemon=True)
        self._warned: set[str] = set()
        self.records = 0  # entries applied to the store (tombstones included)
        # the engine whose cache keys a lookup asks for: the topic's RUNTIME_RECORD_KEY record, None
        # while it has none (nothing cached can be found then)
        self.runtime: str | None = None

    def start(self) -> CacheTail:
        self._thread.start()
        return self

    def loaded(self, timeout_s: float) -> bool:
        """Wait up to timeout_s for the tail to have read the whole topic as it was at start (a
        topic that does not exist is read at once); False if it has not by then."""
        return self._loaded.wait(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (it closes its consumer), waiting for it up to timeout_s."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def __enter__(self) -> CacheTail:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _warn(self, what: str, message: str, *args: object) -> None:
        """A warning said once until the fault it names is over (_recovered)."""
        if what not in self._warned:
            self._warned.add(what)
            log.warning(message, *args)

    def _recovered(self, what: str) -> None:
        self._warned.discard(what)

    def _run(self) -> None:
        consumer: Consumer | None = None
        while not self._stop.is_set():
            try:
                if consumer is None:
                    group = f"{READER_GROUP_PREFIX}{uuid.uuid4().hex[:12]}"
                    consumer = make_consumer(self._settings, group, **TAIL_CONSUMER)
                try:
                    self._follow(consumer)
                except _Rebuild:
                    self.runtime = None
                    self._store.clear()
            except Exception as exc:  # the cache's fault, never the caller's: say it, try again
                self._warn(
                    "fault", "results cache %s cannot be read (results are computed meanwhile): %s", self.topic, exc
                )
                if consumer is not None:
                    _close(consumer)
                    consumer = None
                self._stop.wait(self._recheck_s)
        if consumer is not None:
            _close(consumer)

    def _follow(self, consumer: Consumer) -> None:
        """Assign the topic's partitions from the beginning and apply its records until told to
        stop; _Rebuild when the topic is gone or cut below what was read."""
        partitions = self._partitions(consumer)
        self._recovered("fault")
        if not partitions:
            self._warn("missing", "results cache %s does not exist: every record is computed until it does", self.topic)
            self._loaded.set()  # nothing was written to it
            self._stop.wait(self._recheck_s)
            return
        self._recovered("missing")
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
        ended: set[int] = set()  # partitions read to an end once since assigned: the load is done
        read: dict[int, int] = {}  # partition -> offset after the last record applied
        next_check = time.monotonic() + self._recheck_s
        pending: list[tuple[bytes, bytes | None]] = []  # read, not yet in the store
        due = 0.0  # when they go in, at the latest
        try:
            while not self._stop.is_set():
                wait = min(POLL_S, max(0.0, due - time.monotonic())) if pending else POLL_S
                held = len(pending)
                told_gone = self._read(consume_ready(consumer, BATCH, wait), ended, read, pending)
                if pending and not held:
                    due = time.monotonic() + FOLLOW_APPLY_S
                loading = not self._loaded.is_set()
                if pending and (loading or len(pending) >= BATCH or time.monotonic() >= due):
                    self._store.put_many(pending)
                    self.records += len(pending)
                    pending = []
                if len(ended) == len(partitions):
                    self._loaded.set()
                if told_gone or time.monotonic() >= next_check:
                    next_check = time.monotonic() + self._recheck_s
                    self._check(consumer, partitions, read)
        finally:
            try:
                consumer.unassign()
            except Exception as exc:  # a broken consumer: _run makes another on the next fault
                log.debug("unassigning the cache tail's consumer: %s", exc)

    def _read(
        self, messages: list[Message], ended: set[int], read: dict[int, int], entries: list[tuple[bytes, bytes | None]]
    ) -> bool:
        """Add the records' (key, value) to `entries`; True if the client said the topic or a
        partition is unknown (the metadata is asked before anything is thrown away: it may be a
        moment's)."""
        told_gone = False
        for msg in messages:
            err = msg.error()
            if err is None:  # a record: most events, read lean (key_value)
                partition, offset, key, value = key_value(msg)
                read[partition] = offset + 1
                if key is not None and len(key) == KEY_SIZE:
                    entries.append((key, value))
                else:
                    self._other(partition, offset, key, value)
                continue
            if err.code() in _OUT_OF_RANGE:
                self._warn_rebuild(f"offset {msg.offset()} of partition {msg.partition()} is no longer there")
            if err.code() in _GONE:
                told_gone = True
                continue
            if err.code() == KafkaError._PARTITION_EOF:
                # each partition once at its end since assigned: a topic written to all the time may
                # never have every partition at its end at once
                ended.add(msg.partition() or 0)
            take(msg, set())  # not a record: raises what must stop the tail, logs the rest
        return told_gone

    def _other(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        """A record that is not a cached result: the engine serving the model (RUNTIME_RECORD_KEY),
        or a stranger, skipped with a warning."""
        if key == RUNTIME_RECORD_KEY:
            self.runtime = None if value is None else value.decode("utf-8", "replace")
            return
        self._warn(
            "key",
            "results cache %s holds a record whose key is not a %d-byte reuse key "
            "(partition %d, offset %d): skipped, as are any others",
            self.topic,
            KEY_SIZE,
            partition,
            offset,
        )

    def _check(self, consumer: Consumer, partitions: list[int], read: dict[int, int]) -> None:
        """_Rebuild when the topic is gone, has other partitions, or ends below what was read
        (cut, or deleted and made again between two checks: Tansu then sends nothing at all to
        a consumer past the end, where Kafka says the offset is out of range)."""
        now = self._partitions(consumer)
        if now != partitions:
            self._warn_rebuild("the topic is gone" if not now else f"its partitions are now {now}")
        for partition, offset in read.items():
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, partition), cached=True)
            if 0 <= high < offset:
                self._warn_rebuild(f"partition {partition} ends at {high}, below the {offset} records read")

    def _warn_rebuild(self, why: str) -> None:
        log.warning("results cache %s: %s; reading it again from the beginning", self.topic, why)
        raise _Rebuild(why)

    def _partitions(self, consumer: Consumer) -> list[int]:
        return partitions_of(self._settings, self.topic, METADATA_TIMEOUT_S, consumer=consumer)


def _close(consumer: Consumer) -> None:
    try:
        consumer.close()
    except Exception as exc:  # a consumer of a broker that went away: nothing left to release
        log.debug("closing the cache tail's consumer: %s", exc)
