"""`nearline dlq`: what is in the dead-letter topic, and putting records back where they failed."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from results.outcome import dead_submission
from schemas import DeadLetter, InferenceResult, SerdeError, decode

OUTSTANDING = "outstanding"  # the latest dead letter of a record that has no result
SUPERSEDED = "superseded"  # the record has a later dead letter
RESOLVED = "resolved"  # the record has a result
REPLAYED = "replayed"  # outstanding, but a replay already put it back in flight (no outcome yet)

# A replay marks each letter it put back with a record in the dead-letter topic itself (key
# "replayed/ID", this header): a second replay before the stage has taken the first one skipped
# nothing and sent every record again. No DeadLetter decodes from it, so every reader skips it.
REPLAYED_HEADER = "nearline_dlq_replayed"


@dataclass(frozen=True)
class Entry:
    """A dead letter and where it sits in the dead-letter topic (its id: PARTITION:OFFSET)."""

    partition: int
    offset: int
    letter: DeadLetter
    status: str = OUTSTANDING
    latest: str | None = None  # the id of its record's latest dead letter, where that is another

    @property
    def id(self) -> str:
        return f"{self.partition}:{self.offset}"

    @property
    def record(self) -> tuple[str, str, str]:
        """What failed: the job's record, or where a letter names none (its payload could not be
        decoded), the topic and payload it failed on, so a copy that fails again is the same."""
        d = self.letter
        if d.job_id is not None and d.record_id is not None:
            return ("record", d.job_id, d.record_id)
        return ("payload", d.source_topic, d.payload_sha256 or hashlib.sha256(d.payload).hexdigest())

    def summary(self) -> dict[str, Any]:
        d = self.letter
        return {
            "id": self.id,
            "status": self.status,
            "stage": d.stage,
            "error_type": d.error_type,
            "error": d.error,
            "job_id": d.job_id,
            "record_id": d.record_id,
            "model": d.model,
            "model_version": d.model_version,
            "source": f"{d.source_topic}/{d.source_partition}/{d.source_offset}",
            # the record's index in the pack at that offset (schemas/packs.py); None: a record of its own
            "source_index": d.source_index,
            "failed_at_us": d.failed_at,
        }

    def detail(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "payload_bytes": len(self.letter.payload),
            "payload_base64": base64.b64encode(self.letter.payload).decode(),
        }


def letters(settings: KafkaSettings, topics: Topics, replayed: set[str] | None = None) -> Iterator[Entry]:
    """The dead-letter topic as it is read, each letter unmarked; the ids of letters a replay
    put back are added to `replayed` where one is given."""
    for msg in read_topics(settings, [topics.dead_letters]):
        marked = next((v for k, v in msg.headers if k == REPLAYED_HEADER and v), None)
        if marked is not None:
            if replayed is not None:
                replayed.add(marked.decode())
            continue
        try:
            letter = decode(msg.value, DeadLetter)
        except SerdeError:
            continue  # not a dead letter of ours
        yield Entry(msg.partition, msg.offset, letter)


def entries(settings: KafkaSettings, topics: Topics, *, job_id: str | None = None) -> list[Entry]:
    """Every dead letter (of one job), marked: outstanding, superseded or resolved.

    A replayed record that fails again gets a new dead letter: only the latest of each record is
    outstanding. A record with a result (of the same submission) is resolved, whichever came
    first, as every results reader has it (results.outcome.JobOutcome)."""
    replayed: set[str] = set()
    found = [e for e in letters(settings, topics, replayed) if job_id is None or e.letter.job_id == job_id]
    latest: dict[tuple[str, str, str], Entry] = {}
    for e in found:
        kept = latest.get(e.record)
        if kept is None or (e.letter.failed_at, e.partition, e.offset) > (
            kept.letter.failed_at,
            kept.partition,
            kept.offset,
        ):
            latest[e.record] = e
    resolved = _with_results(settings, topics, [e for e in latest.values() if e.record[0] == "record"])
    marked = []
    for e in found:
        newest = latest[e.record]
        if e.record in resolved:
            marked.append(replace(e, status=RESOLVED))
        elif newest is not e:
            marked.append(replace(e, status=SUPERSEDED, latest=newest.id))
        else:
            marked.append(replace(e, status=REPLAYED) if e.id in replayed else e)
    return marked


def _with_results(settings: KafkaSettings, topics: Topics, dead: list[Entry]) -> set[tuple[str, str, str]]:
    """The records among `dead` that have a result of the submission they failed in. Results are
    keyed job/record, so only those of dead records are decoded."""
    wanted = {f"{e.letter.job_id}/{e.letter.record_id}": e for e in dead}
    if not wanted:
        return set()
    done = set()
    for msg in read_topics(settings, [topics.results]):
        e = wanted.get(msg.key_text)
        if e is None or e.record in done:
            continue
        try:
            result = decode(msg.value, InferenceResult)
        except SerdeError:
            continue
        # a job id submitted again: a result of the other submission does not settle this one
        failed_in, succeeded_in = dead_submission(e.letter), result.timestamps.get("submitted")
        same_record = (result.job_id, result.record_id) == e.record[1:]
        if same_record and (failed_in is None or succeeded_in is None or failed_in == succeeded_in):
            done.add(e.record)
    return done


def select(
    items: Iterable[Entry],
    *,
    job_id: str | None = None,
    stage: str | None = None,
    ids: Iterable[str] = (),
    status: str | None = OUTSTANDING,
) -> list[Entry]:
    """The entries that match every filter given; status None: any status."""
    wanted = set(ids)
    return [
        e
        for e in items
        if (job_id is None or e.letter.job_id == job_id)
        and (stage is None or e.letter.stage == stage)
        and (not wanted or e.id in wanted)
        and (status is None or e.status == status)
    ]


def replay(settings: KafkaSettings, topics: Topics, chosen: list[Entry]) -> int:
    """Produce each payload, unchanged, to the topic it failed on: after a fix, the stage takes it
    again. Results supersede a record's dead letter in every reader (results.outcome.JobOutcome).
    Each letter is marked replayed (REPLAYED_HEADER) in the same call."""
    marks = [
        OutRecord(
            topics.dead_letters, b"{}", key=f"replayed/{e.id}".encode(), headers=[(REPLAYED_HEADER, e.id.encode())]
        )
        for e in chosen
    ]
    records = [
        OutRecord(
            e.letter.source_topic,
            e.letter.payload,
            key=f"{e.letter.job_id}/{e.letter.record_id}".encode() if e.letter.record_id else None,
            headers=[("replayed_from", e.id.encode())],
        )
        for e in chosen
    ]
    produce_all(make_producer(settings.with_client_id("dlq-replay")), records + marks)
    return len(records)
