"""A consumer held in memory, for the poll loop's policy (gpu_consumer/windows.py: windows()) tested
in milliseconds without a broker: the calls windows() makes of a confluent Consumer (consume, poll,
pause, resume, committed, seek, cached watermarks), over partitions that tests append records to.

What it models of librdkafka: records come in offset order per partition, from the position on;
a paused partition gives nothing; a partition that reaches its end gives one PARTITION_EOF event
(enable.partition.eof), again after more records come; the high watermark is the log's end (as a
fetch would have cached it). What it does not: fetch sizes, prefetch, rebalances (a test changes
the Assignment as the callbacks would), time (poll waits as asked, on the real clock)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, TopicPartition

from kafka_io.records import TP


@dataclass(frozen=True)
class MemoryMessage:
    """What kafka_io/events.py reads of a confluent Message."""

    _topic: str
    _partition: int
    _offset: int
    _value: bytes | None
    _key: bytes | None = None
    _headers: list[tuple[str, bytes | None]] | None = None
    _error: KafkaError | None = None

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


@dataclass
class MemoryConsumer:
    logs: dict[TP, list[MemoryMessage]] = field(default_factory=dict)
    committed_offsets: dict[TP, int] = field(default_factory=dict)
    positions: dict[TP, int] = field(default_factory=dict)
    paused: set[TP] = field(default_factory=set)
    assigned: set[TP] = field(default_factory=set)
    consumed: list[MemoryMessage] = field(default_factory=list)  # every record handed out, in order
    _eof_told: set[TP] = field(default_factory=set)

    def append(self, topic: str, partition: int, value: bytes, records: int = 1, key: bytes | None = None) -> None:
        """A record at the partition's end; `records` > 1: a pack holding that many (its header)."""
        log = self.logs.setdefault((topic, partition), [])
        headers: list[tuple[str, bytes | None]] | None = [("records", str(records).encode())] if records > 1 else None
        log.append(MemoryMessage(topic, partition, len(log), value, key, headers))
        self._eof_told.discard((topic, partition))

    def assign(self, partitions: set[TP]) -> None:
        """As a group's assignment would: each partition from its committed offset."""
        self.assigned = set(partitions)
        for tp in partitions:
            self.positions[tp] = self.committed_offsets.get(tp, 0)
            self._eof_told.discard(tp)

    # --- what windows() calls ---

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[MemoryMessage]:
        out: list[MemoryMessage] = []
        while len(out) < num_messages:
            event = self._next()
            if event is None:
                break
            out.append(event)
        if not out and timeout > 0:
            time.sleep(min(timeout, 0.005))
        return out

    def poll(self, timeout: float = -1) -> MemoryMessage | None:
        event = self._next()
        if event is None and timeout > 0:
            time.sleep(min(timeout, 0.005))
        return event

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {(p.topic, p.partition) for p in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {(p.topic, p.partition) for p in partitions}

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        return [
            TopicPartition(p.topic, p.partition, self.committed_offsets.get((p.topic, p.partition), -1001))
            for p in partitions
        ]

    def seek(self, partition: TopicPartition) -> None:
        tp = (partition.topic, partition.partition)
        self.positions[tp] = max(partition.offset, 0)
        self._eof_told.discard(tp)

    def get_watermark_offsets(self, partition: TopicPartition, cached: bool = False) -> tuple[int, int]:
        return 0, len(self.logs.get((partition.topic, partition.partition), []))

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        for p in offsets:
            self.committed_offsets[(p.topic, p.partition)] = p.offset

    def _next(self) -> MemoryMessage | None:
        """The next event of the first readable partition: a record, else its end once."""
        for tp in sorted(self.assigned - self.paused):
            log, at = self.logs.get(tp, []), self.positions.get(tp, 0)
            if at < len(log):
                self.positions[tp] = at + 1
                self.consumed.append(log[at])
                return log[at]
            if tp not in self._eof_told:
                self._eof_told.add(tp)
                return MemoryMessage(tp[0], tp[1], at, None, _error=KafkaError(KafkaError._PARTITION_EOF))
        return None
