"""Submitting a job: validate the whole input first, then produce every record and confirm it."""

from __future__ import annotations

import io
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord
from kafka_io.settings import KafkaSettings, Topics
from kafka_io.topics import TopicSpec, ensure_topics
from producers import InputError, InputFormat, InputRecord, read_text_input
from schemas import RawText, encode, now_us


class InvalidInputError(ValueError):
    def __init__(self, errors: list[InputError]) -> None:
        super().__init__(f"{len(errors)} invalid record(s), first: {errors[0]}")
        self.errors = errors


@dataclass(frozen=True)
class TextInput:
    """An input file (or '-' for stdin), read twice: once to validate, once to produce."""

    path: Path
    fmt: InputFormat = "auto"
    _stdin: bytes | None = None

    @classmethod
    def open(cls, name: str, fmt: InputFormat = "auto") -> TextInput:
        if name == "-":
            return cls(Path("<stdin>"), "lines" if fmt == "auto" else fmt, sys.stdin.buffer.read())
        return cls(Path(name), fmt)

    def read(self) -> Iterator[InputRecord | InputError]:
        stream = io.BytesIO(self._stdin) if self._stdin is not None else None
        return read_text_input(self.path, self.fmt, stream)

    def validate(self) -> tuple[int, list[InputError]]:
        """(valid records, problems) without keeping the records in memory."""
        valid, errors = 0, []
        for item in self.read():
            if isinstance(item, InputError):
                errors.append(item)
            else:
                valid += 1
        return valid, errors

    def records(self) -> Iterator[InputRecord]:
        return (r for r in self.read() if isinstance(r, InputRecord))


@dataclass(frozen=True)
class SubmitReport:
    job_id: str
    model: str
    submitted: int
    skipped: list[InputError]


def new_job_id() -> str:
    return f"job-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def pipeline_topics(topics: Topics, model: str) -> list[TopicSpec]:
    return [TopicSpec(t) for t in (topics.raw_text, topics.tensors(model), topics.results, topics.dead_letters)]


def submit(
    settings: KafkaSettings,
    topics: Topics,
    source: TextInput,
    model: str,
    *,
    job_id: str | None = None,
    skip_invalid: bool = False,
    validated: tuple[int, list[InputError]] | None = None,
    topic: str | None = None,
) -> SubmitReport:
    """Produce every valid record of `source` to raw.text as one job.

    With any invalid record and skip_invalid False, nothing is produced (InvalidInputError): a
    half-submitted file is worse than a rejected one.
    """
    _, errors = validated or source.validate()
    if errors and not skip_invalid:
        raise InvalidInputError(errors)
    job_id = job_id or new_job_id()
    topic = topic or topics.raw_text
    ensure_topics(settings, [*pipeline_topics(topics, model), TopicSpec(topic)])
    producer = make_producer(settings.with_client_id(f"submit-{job_id}"))
    submitted_at = now_us()

    def out_records() -> Iterator[OutRecord]:
        for seq, record in enumerate(source.records()):
            raw = RawText(job_id, record.record_id, seq, model, record.text, submitted_at, record.attributes)
            yield OutRecord(
                topic,
                encode(raw),
                key=f"{job_id}/{record.record_id}".encode(),
                headers=[("job_id", job_id.encode())],
            )

    count = produce_all(producer, out_records())
    return SubmitReport(job_id, model, count, errors)
