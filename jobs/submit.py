"""Submitting a job: validate the whole input first, then produce every record and confirm it."""

from __future__ import annotations

import glob
import io
import json
import os
import re
import secrets
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from jobs.registry import register
from kafka_io.clients import make_producer
from kafka_io.errors import BrokerUnavailableError, DeliveryError
from kafka_io.offsets import group_lag
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord, job_record
from kafka_io.settings import DEFAULT_PRIORITY, KafkaSettings, Priority, Topics
from kafka_io.topics import TopicSpec, ensure_topics, lanes
from producers import InputError, InputFormat, InputRecord, read_text_input
from producers.images import (
    MAX_IMAGE_BYTES,
    ImageFileError,
    ImageRecord,
    file_kind,
    is_image_path,
    left_out_files,
    read_image_file,
    read_image_folder,
    read_image_jsonl,
)
from producers.inputs import compression
from producers.table_rows import DEFAULT_COLUMNS, RESERVED_NAMES, Columns, kept_schema, read_tables, table_kind
from producers.tables import TableFormat, table_files, table_format
from schemas import Job, RawImage, RawText, encode, now_us
from schemas.model_config import check_model_name

InputKind = Literal["auto", "text", "image"]


class SubmitInterruptedError(BrokerUnavailableError):
    """Kafka stopped confirming records part way through a submit: the message says how many it stored."""


class BacklogRefusedError(RuntimeError):
    """The job would push the pipeline's backlog past the configured maximum."""


class UnusableInputError(ValueError):
    """The input as a whole cannot be a job (not a regular file, compressed, no valid record):
    nothing is submitted, with or without --skip-invalid. `errors`: the records' problems, if any."""

    def __init__(self, message: str, errors: list[InputError] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


def table_parts(path: Path, fmt: InputFormat = "auto") -> tuple[Path, ...]:
    """The table files `path` names: itself (a .parquet, .csv, ... or any file with a table
    --format), or a folder's table files when it holds no image; else ()."""
    if fmt in ("jsonl", "lines"):
        return ()
    if path.is_dir():
        files = table_files(path)
        return tuple(files) if files and not any(is_image_path(p) for p in path.rglob("*")) else ()
    return (path,) if fmt != "auto" or table_format(path) is not None else ()


def kept_columns_problem(columns: Columns) -> str | None:
    """Why --keep-columns cannot be kept as asked, before any file is read."""
    clash = sorted(set(columns.keep) & RESERVED_NAMES)
    if clash:
        fields = "field" if len(clash) == 1 else "fields"
        return f"--keep-columns: {', '.join(clash)} would shadow the result's own {fields} of that name"
    return None


class InvalidInputError(ValueError):
    def __init__(self, errors: list[InputError]) -> None:
        super().__init__(f"{len(errors)} invalid record(s), first: {errors[0]}")
        self.errors = errors


def detect_kind(path: Path) -> Literal["text", "image"]:
    """A folder or an image file is images; a JSONL whose first object has "image" is images; else text."""
    if path.is_dir() or is_image_path(path):
        return "image"
    if path.suffix.lower() in (".jsonl", ".ndjson") and path.is_file():
        with path.open("rb") as f:
            for raw in f:
                if raw.strip():
                    try:
                        first = json.loads(raw)
                    except ValueError:
                        return "text"  # the text reader reports the line
                    return "image" if isinstance(first, dict) and "image" in first else "text"
    return "text"


def unreadable_input(path: Path, folder_ok: bool) -> str | None:
    """Why `path` cannot be read as an input, or None. A device or a FIFO is refused before it is
    opened: /dev/zero would be read without end, a FIFO would block (and could not be read twice)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    if stat.S_ISREG(mode) or (folder_ok and stat.S_ISDIR(mode)):
        return None
    return f"is {file_kind(mode)}, not a regular file"


def compressed_input(head: bytes, where: str) -> str | None:
    """Why input starting with `head` is refused when it is compressed, else None. Refused, not
    read: a job's input is read twice (to validate, then to send), and decompressing it first
    costs the user one command."""
    found = compression(head)
    if found is None:
        return None
    name, command = found
    return f"is {name}-compressed; nearline reads uncompressed input: decompress it first ({command} {where})"


def check_input(source: JobInput, validated: tuple[int, list[InputError]], skip_invalid: bool) -> None:
    """UnusableInputError when the input as a whole cannot be a job, InvalidInputError when some
    record is invalid and skip_invalid is off; a job is only submitted past both."""
    valid, errors = validated
    wholes = {str(p) for p in (source.parts or (source.path,)) if not p.is_dir()}
    whole = next((e for e in errors if e.line == 0 and e.path in wholes), None)
    if whole is not None:
        advice = ""
        if "is a FIFO" in whole.reason:
            advice = (
                " (a job reads its input twice, to validate it and then to send it; "
                "to send a stream, pipe it to stdin: - as INPUT)"
            )
        raise UnusableInputError(f"{whole}: nothing was submitted{advice}")
    if errors and not skip_invalid:
        raise InvalidInputError(errors)
    if valid == 0:
        what = "images" if source.kind == "image" and source.path.is_dir() else "records"
        if errors:
            raise UnusableInputError(
                f"{source.path}: none of its {what} is valid ({len(errors)} invalid): nothing was submitted", errors
            )
        raise UnusableInputError(f"{source.path} holds no {what}: nothing was submitted")


@dataclass(frozen=True)
class JobInput:
    """An input file, folder or '-' for stdin, read twice: once to validate, once to produce."""

    path: Path
    kind: Literal["text", "image"]
    fmt: InputFormat = "auto"
    max_image_bytes: int = MAX_IMAGE_BYTES
    _stdin: bytes | None = None
    # Several files or folders read as one job (a scheduled input's glob); each record id is
    # prefixed with its file's path relative to the others, so ids stay unique across files.
    parts: tuple[Path, ...] = ()
    follow_symlinks: bool = False  # folder inputs: read symlinks that lead out of the folder
    columns: Columns = DEFAULT_COLUMNS
    # The input's table files (Parquet, CSV, Arrow) read as one table: row numbers and ids run
    # across them, so a folder or glob of tables needs no file prefix on its ids.
    tables: tuple[Path, ...] = ()

    @classmethod
    def open(
        cls,
        name: str,
        fmt: InputFormat = "auto",
        kind: InputKind = "auto",
        max_image_bytes: int = MAX_IMAGE_BYTES,
        follow_symlinks: bool = False,
        columns: Columns = DEFAULT_COLUMNS,
    ) -> JobInput:
        if name == "-":
            return cls(
                Path("<stdin>"),
                "text",
                "lines" if fmt == "auto" else fmt,
                max_image_bytes,
                sys.stdin.buffer.read(),
                columns=columns,
            )
        problem = kept_columns_problem(columns)
        if problem:
            raise UnusableInputError(problem)
        path = Path(name)
        if glob.has_magic(name) and not path.exists():  # a quoted glob: every file it matches, as one job
            return cls.matching(name, fmt, kind, max_image_bytes, columns)
        tables = table_parts(path, fmt)
        if tables:
            kind = table_kind(tables, columns, _table_fmt(fmt)) if kind == "auto" else kind
            return cls(path, kind, fmt, max_image_bytes, columns=columns, tables=tables)
        kind = detect_kind(path) if kind == "auto" else kind
        return cls(path, kind, fmt, max_image_bytes, follow_symlinks=follow_symlinks, columns=columns)

    @classmethod
    def matching(
        cls,
        pattern: str,
        fmt: InputFormat = "auto",
        kind: InputKind = "auto",
        max_image_bytes: int = MAX_IMAGE_BYTES,
        columns: Columns = DEFAULT_COLUMNS,
    ) -> JobInput:
        """What a glob (or plain path) names now, as one input; UnusableInputError (a ValueError)
        if nothing usable matches."""
        paths = [Path(p) for p in sorted(glob.glob(pattern))] if glob.has_magic(pattern) else [Path(pattern)]
        paths = [p for p in paths if p.exists()]
        if not paths:
            missing = f"{pattern}: matches no file" if glob.has_magic(pattern) else f"{pattern}: no such file"
            raise UnusableInputError(missing)
        if len(paths) == 1:
            return cls.open(str(paths[0]), fmt, kind, max_image_bytes, columns=columns)
        tables = [table_parts(p, fmt) for p in paths]
        if all(tables):
            files = tuple(f for part in tables for f in part)
            kind = table_kind(files, columns, _table_fmt(fmt)) if kind == "auto" else kind
            return cls(Path(pattern), kind, fmt, max_image_bytes, columns=columns, tables=files)
        if any(tables):
            raise UnusableInputError(
                f"{pattern}: matches both table files (Parquet, CSV, Arrow) and others; one job reads one kind"
            )
        kinds = {detect_kind(p) for p in paths}
        if len(kinds) > 1:
            raise ValueError(f"{pattern}: matches both text and image inputs; one job holds one kind")
        return cls(Path(pattern), kinds.pop(), parts=tuple(paths), columns=columns)

    def read(self) -> Iterator[InputRecord | ImageRecord | InputError]:
        if self.parts:
            return self._read_parts()
        if self.tables:
            return self._read_tables()
        if self._stdin is None:
            problem = unreadable_input(self.path, folder_ok=self.kind == "image")
            if problem is None and not (self.path.is_dir() or is_image_path(self.path)):
                with self.path.open("rb") as f:
                    problem = compressed_input(f.read(10), str(self.path))
        else:
            problem = compressed_input(self._stdin[:10], "FILE")
        if problem:
            return iter([InputError(str(self.path), 0, problem)])
        if self.kind == "image":
            if self.path.is_dir() or is_image_path(self.path):
                return read_image_folder(self.path, self.max_image_bytes, follow_symlinks=self.follow_symlinks)
            return read_image_jsonl(self.path, self.max_image_bytes)
        stream = io.BytesIO(self._stdin) if self._stdin is not None else None
        return read_text_input(self.path, self.fmt, stream, self.columns.text_field, self.columns.id_field)

    def _read_tables(self) -> Iterator[InputRecord | ImageRecord | InputError]:
        for part in self.tables:
            problem = unreadable_input(part, folder_ok=False)
            if problem:
                return iter([InputError(str(part), 0, problem)])
        return read_tables(self.tables, self.columns, self.kind, self.max_image_bytes, _table_fmt(self.fmt))

    def kept_schema(self) -> bytes | None:
        """The kept columns' Arrow schema (IPC bytes) for the job's registry row, from which its
        outputs learn each kept column's type; None when no column is kept."""
        schema = kept_schema(self.tables, self.columns, _table_fmt(self.fmt)) if self.tables else None
        return None if schema is None else schema.serialize().to_pybytes()

    def _read_parts(self) -> Iterator[InputRecord | ImageRecord | InputError]:
        common = Path(os.path.commonpath(self.parts))  # matching() makes parts only of two or more
        for part in self.parts:
            prefix = part.relative_to(common).as_posix()
            for item in replace(self, path=part, parts=()).read():
                yield item if isinstance(item, InputError) else replace(item, record_id=f"{prefix}:{item.record_id}")

    def left_out(self) -> list[Path]:
        """Files in an image folder that are not images by name, so not part of the job: worth a
        note, since a folder of .heic photos would otherwise run as an empty job."""
        if self.kind != "image" or self.tables:
            return []
        folders = [p for p in (self.parts or (self.path,)) if p.is_dir()]
        return [f for folder in folders for f in left_out_files(folder, follow_symlinks=self.follow_symlinks)]

    def validate(self) -> tuple[int, list[InputError]]:
        """(valid records, problems) without keeping the records in memory."""
        valid, errors = 0, []
        for item in self.read():
            if isinstance(item, InputError):
                errors.append(item)
            else:
                valid += 1
        return valid, errors

    def raw_topic(self, topics: Topics, priority: Priority = DEFAULT_PRIORITY) -> str:
        return topics.lane(topics.raw_image if self.kind == "image" else topics.raw_text, priority)

    def out_records(
        self,
        job_id: str,
        model: str,
        topic: str,
        late: list[InputError] | None = None,
        submitted_at: int | None = None,
    ) -> Iterator[OutRecord]:
        """The valid records, encoded. What is invalid now is left out and added to `late`: with
        validation run just before, that is an image that changed since (gone, replaced by something
        that is not a regular file, or grown past the cap). `submitted_at` names the submission (the
        registry row's), which every stage carries on, so a cancellation skips only the submission
        it names."""
        submitted_at = submitted_at if submitted_at is not None else now_us()
        seq = 0
        for item in self.read():
            if isinstance(item, InputError):
                if late is not None:
                    late.append(item)
                continue
            if isinstance(item, ImageRecord):
                try:
                    data = item.data if item.data is not None else read_image_file(item.path, self.max_image_bytes)
                except ImageFileError as exc:
                    if late is not None:
                        late.append(InputError(str(self.path if item.line else item.path), item.line, str(exc)))
                    continue
                value = encode(
                    RawImage(
                        job_id,
                        item.record_id,
                        seq,
                        model,
                        data,
                        item.content_type,
                        str(item.path),
                        submitted_at,
                        item.attributes,
                    )
                )
            else:
                value = encode(RawText(job_id, item.record_id, seq, model, item.text, submitted_at, item.attributes))
            yield job_record(topic, value, job_id, item.record_id, submitted_at)
            seq += 1


def _table_fmt(fmt: InputFormat) -> TableFormat | None:
    return None if fmt in ("auto", "jsonl", "lines") else fmt  # type: ignore[return-value]


@dataclass(frozen=True)
class SubmitReport:
    job_id: str
    model: str
    submitted: int
    skipped: list[InputError]
    submission: int | None = None  # names this submission of the job id (its records' header)


# A job id is part of every record's key (job_id/record_id), of file names (`nearline report` writes
# JOB_ID.html) and of the tab-separated lines of `jobs list`: one path segment of printable
# characters, as a model name is (schemas/model_config.py), upper case allowed.
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
JOB_ID_RULE = "use letters, digits, '.', '_' and '-' (starting with a letter or digit, no '..', at most 100 characters)"


def job_id_problem(job_id: str) -> str | None:
    """Why `job_id` cannot name a job given on the command line, or None when it can."""
    if JOB_ID.fullmatch(job_id) is None or ".." in job_id:
        shown = repr(job_id) if len(job_id) <= 60 else f"{job_id[:40]!r}... ({len(job_id):,} characters)"
        return f"invalid job id {shown}: {JOB_ID_RULE}"
    return None


def new_job_id() -> str:
    return f"job-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def backlog(
    settings: KafkaSettings, topics: Topics, model: str, raw_topic: str, priority: Priority = DEFAULT_PRIORITY
) -> dict[str, int]:
    """Records submitted but not yet consumed, in the job's lane: by the preprocess app, and by the
    model's GPU group (a live job is not refused for a batch backfill it will overtake)."""
    tensors = topics.lane(topics.tensors(model), priority)
    return {
        raw_topic: group_lag(settings, topics.preprocess_app_id, raw_topic),
        tensors: group_lag(settings, topics.gpu_group(model), tensors),
    }


def pipeline_topics(topics: Topics, model: str) -> list[TopicSpec]:
    """Every topic a job of `model` goes through; each stage topic in both lanes."""
    stages = (topics.raw_text, topics.raw_image, topics.tensors(model))
    return [
        *(s for t in stages for s in lanes(topics, TopicSpec(t))),
        TopicSpec(topics.results),
        TopicSpec(topics.dead_letters),
    ]


def submit(
    settings: KafkaSettings,
    topics: Topics,
    source: JobInput,
    model: str,
    *,
    job_id: str | None = None,
    skip_invalid: bool = False,
    validated: tuple[int, list[InputError]] | None = None,
    topic: str | None = None,
    max_backlog: int | None = None,
    schedule: str | None = None,
    attributes: dict[str, str] | None = None,
    priority: Priority = DEFAULT_PRIORITY,
) -> SubmitReport:
    """Produce every valid record of `source` to raw.text or raw.image as one job.

    With any invalid record and skip_invalid False, nothing is produced (InvalidInputError): a
    half-submitted file is worse than a rejected one.
    """
    check_model_name(model)
    valid, errors = validated or source.validate()
    check_input(source, (valid, errors), skip_invalid)
    job_id = job_id or new_job_id()
    topic = topic or source.raw_topic(topics, priority)
    ensure_topics(settings, [*pipeline_topics(topics, model), TopicSpec(topic)])
    if max_backlog is not None and valid > max_backlog:  # no wait and no worker would ever let it in
        raise BacklogRefusedError(
            f"refused: this job alone has {valid} records, over the maximum backlog of {max_backlog}: "
            "split it into jobs of at most that many records, or raise --max-backlog"
        )
    if max_backlog is not None:
        current = backlog(settings, topics, model, topic, priority)
        if sum(current.values()) + valid > max_backlog:
            waiting = ", ".join(f"{t}: {n}" for t, n in current.items())
            raise BacklogRefusedError(
                f"refused: the backlog is {sum(current.values())} records ({waiting}); this job adds {valid}, "
                f"over the maximum of {max_backlog}. Retry later or add workers."
            )
    # Not idempotent: a fresh idempotent producer holds every record for 0.5-1 s while it gets a
    # producer id, the whole latency of a small job. A retry's duplicate is dropped downstream like
    # any at-least-once redelivery (results are keyed by job and sequence).
    producer = make_producer(settings.with_client_id(f"submit-{job_id}"), idempotent=False)
    late: list[InputError] = []
    submitted_at = now_us()
    try:
        count = produce_all(producer, source.out_records(job_id, model, topic, late, submitted_at))
    except DeliveryError as exc:
        raise SubmitInterruptedError(
            f"job {job_id}: Kafka at {settings.bootstrap_servers} stopped taking records mid-submit ({exc}). "
            f"It confirmed {exc.confirmed} of {valid} records; the job was not registered, so nothing waits for "
            f"them. Submit it again once Kafka is back; with --job-id {job_id}, only the new submission counts."
        ) from None
    # Registered once every record is stored, so a registered job's total is what was submitted.
    register(
        settings,
        topics,
        Job(
            job_id,
            model,
            str(source.path),
            source.kind,
            count,
            submitted_at,
            schedule=schedule,
            attributes=attributes or {},
            submission=submitted_at,
            columns=source.kept_schema(),
            priority=priority,
        ),
    )
    known = set(errors)
    changed = [replace(e, reason=f"changed since validation: {e.reason}") for e in late if e not in known]
    return SubmitReport(job_id, model, count, errors + changed, submitted_at)
