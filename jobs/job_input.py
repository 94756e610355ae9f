"""A job's input (a file, a folder, a glob of them, a table or stdin) as one source of records:
validated whole before anything is produced, then each valid record encoded and produced. The
valid records validation read are kept for the produce while they fit in KEEP_BYTES, so a submit
parses its input once; a larger input is read a second time, to keep memory bounded."""

from __future__ import annotations

import glob
import io
import itertools
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from jobs.input_problems import (
    InvalidInputError,
    UnusableInputError,
    compressed_input,
    fifo_advice,
    kept_columns_problem,
    options_problem,
    stdin_format_problem,
    unreadable_input,
)
from kafka_io.records import OutRecord, job_record
from kafka_io.topology import DEFAULT_LANE, Lane, Topics
from producers.formats import AUTO, JSON_LINES, LINES, OPENAI_BATCH, suffix_format, table_titles
from producers.images import (
    MAX_IMAGE_BYTES,
    ImageFileError,
    ImageRecord,
    is_image_path,
    left_out_files,
    read_image_file,
    read_image_folder,
    read_image_jsonl,
)
from producers.inputs import InputError, InputRecord
from producers.openai_batch import batch_model
from producers.packing import TextPacker
from producers.sniffing import detect_kind, is_openai_batch_file, read_text_input, table_parts
from producers.table_rows import DEFAULT_COLUMNS, Columns, kept_schema, read_tables, table_kind
from schemas import RawImage, encode, now_us
from schemas.generation_request import REQUEST_ATTRIBUTE, RequestDefaults, RequestError
from schemas.packs import PackSettings

InputKind = Literal["auto", "text", "image"]
Record = InputRecord | ImageRecord

# Valid records kept between validation and the produce: up to about this many bytes of their
# text, attributes and image data, each counted with _RECORD_BYTES for its own objects (the
# dataclass, its id, its attributes dict). Reading and parsing the input again cost ~3 us a
# short JSON Lines text on the 2-core EPYC, ~4% of all `nearline submit --wait` spends on it.
KEEP_BYTES = 64 * 2**20
_RECORD_BYTES = 400
STDIN = Path("<stdin>")
# Where a submission's texts are cut into packs in raw.text (schemas/packs.py: 128 texts or 512 KiB,
# far under Kafka's default 1 MB message.max.bytes). $NEARLINE_PACK_RECORDS and
# $NEARLINE_PACK_BYTES set others for every command that writes raw.text (pack_limits_from_env),
# e.g. for a broker whose message.max.bytes is lower; JobSettings(pack_limits=...) in code (jobs/submit.py).
DEFAULT_PACK_LIMITS = PackSettings()
ENV_PACK_RECORDS, ENV_PACK_BYTES = "NEARLINE_PACK_RECORDS", "NEARLINE_PACK_BYTES"


def pack_limits_from_env(environ: Mapping[str, str] = os.environ) -> PackSettings:
    """DEFAULT_PACK_LIMITS, with what $NEARLINE_PACK_RECORDS and $NEARLINE_PACK_BYTES set; a
    ValueError names a value that is not a whole number of at least 1."""
    limits = {}
    for name, field in ((ENV_PACK_RECORDS, "max_records"), (ENV_PACK_BYTES, "max_bytes")):
        value = environ.get(name, "").strip()
        if not value:
            continue
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{name}={value!r}: a pack's limit must be a whole number of at least 1")
        limits[field] = int(value)
    return replace(DEFAULT_PACK_LIMITS, **limits) if limits else DEFAULT_PACK_LIMITS


def check_input(source: JobInput, validated: tuple[int, list[InputError]], skip_invalid: bool) -> None:
    """UnusableInputError when the input as a whole cannot be a job, InvalidInputError when some
    record is invalid and skip_invalid is off; a job is only submitted past both."""
    valid, errors = validated
    wholes = {str(p) for p in (source.parts or (source.path,)) if not p.is_dir()}
    whole = next((e for e in errors if e.line == 0 and e.path in wholes), None)
    if whole is not None:
        advice = f" ({fifo_advice(Path(whole.path))})" if "is a FIFO" in whole.reason else ""
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
    fmt: str = AUTO
    max_image_bytes: int = MAX_IMAGE_BYTES
    _stdin: bytes | None = None
    # The files or folders a glob matched, read as one job (a scheduled input's): each record id
    # is prefixed with its file's path below the glob's fixed folder (glob_base), so ids stay
    # unique across files and the same whether the glob matched one file or many.
    parts: tuple[Path, ...] = ()
    follow_symlinks: bool = False  # folder inputs: read symlinks that lead out of the folder
    columns: Columns = DEFAULT_COLUMNS
    # The input's table files read as one table: row numbers and ids run across them, so a folder
    # or glob of tables needs no file prefix on its ids.
    tables: tuple[Path, ...] = ()

    @classmethod
    def open(
        cls,
        name: str,
        fmt: str = AUTO,
        kind: InputKind = "auto",
        max_image_bytes: int = MAX_IMAGE_BYTES,
        follow_symlinks: bool = False,
        columns: Columns = DEFAULT_COLUMNS,
    ) -> JobInput:
        if name == "-":
            problem = stdin_format_problem(fmt)
            if problem:
                raise UnusableInputError(problem)
            stdin = cls(STDIN, "text", LINES.name if fmt == AUTO else fmt, max_image_bytes, columns=columns)
            return replace(stdin.checked(), _stdin=sys.stdin.buffer.read())
        problem = kept_columns_problem(columns)
        if problem:
            raise UnusableInputError(problem)
        path = Path(name)
        if glob.has_magic(name) and not path.exists():  # a quoted glob: every file it matches, as one job
            return cls.matching(name, fmt, kind, max_image_bytes, columns)
        # a FIFO or device named .parquet is refused by name later, never opened: reading its schema hung
        tables = table_parts(path, fmt) if unreadable_input(path, folder_ok=True) is None else ()
        if tables:
            kind = table_kind(tables, columns, fmt) if kind == "auto" else kind
            return cls(path, kind, fmt, max_image_bytes, columns=columns, tables=tables).checked()
        kind = detect_kind(path) if kind == "auto" else kind
        return cls(path, kind, fmt, max_image_bytes, follow_symlinks=follow_symlinks, columns=columns).checked()

    @classmethod
    def matching(
        cls,
        pattern: str,
        fmt: str = AUTO,
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
        tables = [table_parts(p, fmt) for p in paths]
        if len(paths) == 1 and not (glob.has_magic(pattern) and not tables[0]):
            # a plain path, or a glob's one table: a glob's other inputs keep the glob's ids whatever it matches
            return cls.open(str(paths[0]), fmt, kind, max_image_bytes, columns=columns)
        if all(tables):
            files = tuple(f for part in tables for f in part)
            kind = table_kind(files, columns, fmt) if kind == "auto" else kind
            return cls(Path(pattern), kind, fmt, max_image_bytes, columns=columns, tables=files).checked()
        if any(tables):
            raise UnusableInputError(
                f"{pattern}: matches both table files ({table_titles()}) and others; one job reads one kind"
            )
        kinds = {detect_kind(p) for p in paths}
        if len(kinds) > 1:
            raise ValueError(f"{pattern}: matches both text and image inputs; one job holds one kind")
        return cls(Path(pattern), kinds.pop(), parts=tuple(paths), columns=columns).checked()

    def checked(self) -> JobInput:
        """Itself, or UnusableInputError naming the column options it would ignore."""
        problem = options_problem(self.columns, self.reads, "stdin" if self.path == STDIN else str(self.path))
        if problem:
            raise UnusableInputError(problem)
        return self

    @property
    def reads(self) -> str:
        """What the input is read as: "table", "jsonl" (texts), else in words."""
        if self.tables:
            return "table"
        if self.kind == "image":
            return "images"
        paths = self.parts or (self.path,)
        if self.openai_batch:
            return OPENAI_BATCH.name
        if self.fmt == JSON_LINES.name or (self.fmt == AUTO and any(suffix_format(p) is JSON_LINES for p in paths)):
            return "jsonl"
        return "texts, one per line"

    @property
    def openai_batch(self) -> bool:
        """Whether the input is OpenAI batch requests: --format openai-batch, or JSON Lines whose
        first object is a request (each file of a glob is told apart by itself when read)."""
        if self.fmt == OPENAI_BATCH.name:
            return True
        paths = self.parts or (self.path,)
        return self.fmt == AUTO and self.kind == "text" and is_openai_batch_file(paths[0])

    def openai_model(self) -> str | None:
        """The model an OpenAI batch input's first request names (body.model), else None."""
        if not self.openai_batch:
            return None
        if self._stdin is not None:
            return batch_model(self.path, io.BytesIO(self._stdin))
        return batch_model((self.parts or (self.path,))[0])

    def read(self) -> Iterator[InputRecord | ImageRecord | InputError]:
        records = self._read()
        defaults = self.columns.requests
        return as_requests(records, defaults, str(self.path)) if defaults.given else records

    def _read(self) -> Iterator[InputRecord | ImageRecord | InputError]:
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
        return read_text_input(self.path, self.fmt, stream, self.columns)

    def _read_tables(self) -> Iterator[InputRecord | ImageRecord | InputError]:
        for part in self.tables:
            problem = unreadable_input(part, folder_ok=False)
            if problem:
                return iter([InputError(str(part), 0, problem)])
        return read_tables(self.tables, self.columns, self.kind, self.max_image_bytes, self.fmt)

    def kept_schema(self) -> bytes | None:
        """The kept columns' Arrow schema (IPC bytes) for the job's registry row, from which its
        outputs learn each kept column's type; None when no column is kept."""
        schema = kept_schema(self.tables, self.columns, self.fmt) if self.tables else None
        return None if schema is None else schema.serialize().to_pybytes()

    def _read_parts(self) -> Iterator[InputRecord | ImageRecord | InputError]:
        base = glob_base(str(self.path))
        for part in self.parts:
            prefix = part.relative_to(base).as_posix()
            for item in replace(self, path=part, parts=())._read():
                yield item if isinstance(item, InputError) else replace(item, record_id=f"{prefix}:{item.record_id}")

    def left_out(self) -> list[Path]:
        """Files in an image folder that are not images by name, so not part of the job: worth a
        note, since a folder of .heic photos would otherwise run as an empty job."""
        if self.kind != "image" or self.tables:
            return []
        folders = [p for p in (self.parts or (self.path,)) if p.is_dir()]
        return [f for folder in folders for f in left_out_files(folder, follow_symlinks=self.follow_symlinks)]

    def validate_keeping(self, max_bytes: int = KEEP_BYTES) -> tuple[int, list[InputError], list[Record] | None]:
        """(valid records, problems), and the valid records it read, for out_records to produce without
        reading the input again; None in their place when they hold more than about max_bytes (0: keep none)."""
        valid, errors = 0, []
        kept: list[Record] | None = []
        held = 0
        for item in self.read():
            if isinstance(item, InputError):
                errors.append(item)
                continue
            valid += 1
            if kept is not None:
                held += _held_bytes(item)
                if held > max_bytes:
                    kept = None
                else:
                    kept.append(item)
        return valid, errors, kept

    def raw_topic(self, topics: Topics, priority: Lane = DEFAULT_LANE) -> str:
        return topics.lane(topics.raw_image if self.kind == "image" else topics.raw_text, priority)

    def out_records(
        self,
        job_id: str,
        model: str,
        topic: str,
        late: list[InputError] | None = None,
        submitted_at: int | None = None,
        records: list[Record] | None = None,
        limits: PackSettings | None = None,
    ) -> Iterator[OutRecord]:
        """The valid records, encoded: `records` when validate_keeping kept them, else the input
        read again. Texts go out in packs (schemas/packs.py) cut by `limits`, each a Kafka record
        whose `records` header counts its texts; an image is a Kafka record of its own. Sequence
        numbers run 0.. over the records in input order, packs or not. What is invalid now is
        left out and added to `late`: with validation run just before, that is an image that
        changed since (gone, replaced by something that is not a regular file, or grown past the
        cap). `submitted_at` names the submission (the registry row's), which every stage carries
        on, so a cancellation skips only the submission it names."""
        submitted_at = submitted_at if submitted_at is not None else now_us()
        seq = 0
        texts = TextPacker(job_id, model, topic, submitted_at, limits or pack_limits_from_env())
        items: Iterable[Record | InputError] = self.read() if records is None else records
        for item in items:
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
                yield from texts.flush()  # a job is one kind; were it mixed, the order would still hold
                yield job_record(topic, value, job_id, item.record_id, submitted_at)
            else:
                yield from texts.add(item, seq)
            seq += 1
        yield from texts.flush()


def glob_base(pattern: str) -> Path:
    """The folder a glob's matches are named from in their record ids: its leading components
    without a wildcard ("/data/in" of "/data/in/*.jsonl", "/data" of "/data/*/x.jsonl"). Fixed
    by the pattern, not by what it matches, so a schedule's ids do not change between ticks."""
    parts = Path(pattern).parts[:-1]
    fixed = list(itertools.takewhile(lambda part: not glob.has_magic(part), parts))
    return Path(*fixed) if fixed else Path()


def _held_bytes(record: Record) -> int:
    """About the memory a kept record holds: its text or image bytes, attributes and objects."""
    held = _RECORD_BYTES + (len(record.text) if isinstance(record, InputRecord) else len(record.data or b""))
    if record.attributes:
        held += sum(len(k) + len(v) for k, v in record.attributes.items())
    return held


def as_requests(
    records: Iterator[InputRecord | ImageRecord | InputError], defaults: RequestDefaults, path: str
) -> Iterator[InputRecord | ImageRecord | InputError]:
    """Every text record as a generation request under the job's defaults (--max-tokens,
    --temperature, --system-prompt): a plain text becomes a prompt; a request keeps its own params."""
    for record in records:
        if not isinstance(record, InputRecord):
            yield record
            continue
        is_request = REQUEST_ATTRIBUTE in record.attributes
        try:
            request = defaults.applied(record.text, is_request)
        except RequestError as exc:
            yield InputError(path, record.line, str(exc))
            continue
        yield replace(record, text=request.to_text(), attributes={**record.attributes, REQUEST_ATTRIBUTE: "true"})
