"""`nearline dlq`: what is in the dead-letter topic, and putting records back where they failed."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord
from kafka_io.settings import KafkaSettings, Topics
from schemas import DeadLetter, SerdeError, decode


@dataclass(frozen=True)
class Entry:
    """A dead letter and where it sits in the dead-letter topic (its id: PARTITION:OFFSET)."""

    partition: int
    offset: int
    letter: DeadLetter

    @property
    def id(self) -> str:
        return f"{self.partition}:{self.offset}"

    def summary(self) -> dict[str, Any]:
        d = self.letter
        return {
            "id": self.id,
            "stage": d.stage,
            "error_type": d.error_type,
            "error": d.error,
            "job_id": d.job_id,
            "record_id": d.record_id,
            "model": d.model,
            "model_version": d.model_version,
            "source": f"{d.source_topic}/{d.source_partition}/{d.source_offset}",
            "failed_at_us": d.failed_at,
        }

    def detail(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "payload_bytes": len(self.letter.payload),
            "payload_base64": base64.b64encode(self.letter.payload).decode(),
        }


def entries(settings: KafkaSettings, topics: Topics) -> Iterator[Entry]:
    for msg in read_topics(settings, [topics.dead_letters]):
        try:
            letter = decode(msg.value, DeadLetter)
        except SerdeError:
            continue  # not a dead letter of ours
        yield Entry(msg.partition, msg.offset, letter)


def select(
    items: Iterable[Entry], *, job_id: str | None = None, stage: str | None = None, ids: Iterable[str] = ()
) -> list[Entry]:
    wanted = set(ids)
    return [
        e
        for e in items
        if (job_id is None or e.letter.job_id == job_id)
        and (stage is None or e.letter.stage == stage)
        and (not wanted or e.id in wanted)
    ]


def replay(settings: KafkaSettings, chosen: list[Entry]) -> int:
    """Produce each payload, unchanged, to the topic it failed on: after a fix, the stage takes it
    again. Results supersede a record's dead letter in every reader (jobs.results.JobOutcome)."""
    records = [
        OutRecord(
            e.letter.source_topic,
            e.letter.payload,
            key=f"{e.letter.job_id}/{e.letter.record_id}".encode() if e.letter.record_id else None,
            headers=[("replayed_from", e.id.encode())],
        )
        for e in chosen
    ]
    return produce_all(make_producer(settings.with_client_id("dlq-replay")), records)
