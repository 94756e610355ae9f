"""An InferenceResult's leading fields read directly from its bytes, for the readers that count a
job's results (`submit --wait`, `status`).

fastavro's reader walks the parsed schema on every call (~8 us a MiniLM result here) where a count
needs five leading fields: read_result_head() reads them and stops before the outputs (~1.4 us).
The rest of the record is not read, so a result whose body is corrupt is counted here and
refused where it is decoded whole (`results`, `run`); the results topic is written only by GPU
workers, and Kafka checks every record batch's CRC. A whole result read this way in Python was
slower than fastavro (12.6 against 8 us), so whole results stay with fastavro. Records of
another writer schema than the current one and v1 (the same fields without the generation ones)
give None: decode those whole.

A generation's fields (text, finish_reason, completion_tokens, cached_prompt_tokens) come last,
after the stage timestamps, which the body reader does not read: it reads a current result only
when its last four bytes are those fields at their defaults (NOT_GENERATION, what every
embedding or classifier result ends with), and gives None for any other (a generation: decode it
whole). Read backwards, those bytes are exactly two zero varints and then either an empty
finish_reason or one that ends in two U+0000 characters, which no writer writes ("stop" or
"length"); so a result read here is not a generation. schemas/avro/inference_result.avsc changing
its fields must change this module too; tests/schemas/test_inference_result_bytes.py would show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

from schemas.avro_bytes import read_count, read_long, read_map, read_string, read_tensor
from schemas.errors import TruncatedRecordError
from schemas.records import InferenceResult
from schemas.result_encoding import NOT_GENERATION
from schemas.serde import HEADER_LEN, MAGIC, fingerprint_of

# Results of schemas/avro/history/inference_result.v1.avsc (its CRC-64-AVRO fingerprint): the
# current fields up to the timestamps, so the same reads serve them.
V1_HEADER = MAGIC + bytes.fromhex("61e0a3c7f5c8b2f9")


@cache
def result_header() -> bytes:
    """The bytes every result of the current schema version starts with: the magic and its fingerprint."""
    return MAGIC + fingerprint_of(InferenceResult.SCHEMA)


@cache
def result_headers() -> tuple[bytes, bytes]:
    """The headers of the results these readers read: the current version's, then v1's (for
    bytes.startswith)."""
    return result_header(), V1_HEADER


class ResultHead(NamedTuple):
    """A result's leading fields: enough to count it, keep one per record and pick its version.
    A tuple: made once per result a wait counts, where a frozen dataclass cost ~1 us more."""

    job_id: str
    record_id: str
    seq: int
    model: str
    model_version: str


def read_result_head(data: bytes) -> ResultHead | None:
    """The leading fields, or None when `data` was written with another schema (decode it whole)."""
    read = _read_head(data)
    return None if read is None else read[0]


def _read_head(data: bytes) -> tuple[ResultHead, int] | None:
    """read_result_head, and where the outputs start."""
    if not data.startswith(result_headers()):
        return None
    try:
        job_id, p = read_string(data, HEADER_LEN)
        record_id, p = read_string(data, p)
        seq, p = read_long(data, p)
        model, p = read_string(data, p)
        version, p = read_string(data, p)
    except (IndexError, UnicodeDecodeError) as exc:
        raise TruncatedRecordError(f"{InferenceResult.SCHEMA} body is truncated or malformed: {exc}") from None
    return ResultHead(job_id, record_id, seq, model, version), p


class ResultBody(NamedTuple):
    """What an output line needs of a result, read from its bytes: its head, each output's
    (name, dtype, shape) and where its data lies in the bytes, its labels, batch and attributes.
    A tuple, not a dataclass: `results` reads one a record, and a frozen dataclass's construction
    alone costs ~1 us of the few a record is allowed."""

    head: ResultHead
    outputs: tuple[tuple[str, str, tuple[int, ...]], ...]
    spans: tuple[tuple[int, int], ...]  # each output's data: value[start:end]
    labels: tuple[str, ...]
    batch_id: str
    batch_size: int
    attributes: dict[str, str]


@dataclass(frozen=True)
class OutputsLayout:
    """The outputs of a result as bytes: from the outputs' count to the first data byte, then
    between one output's data and the next one's. Every result of one model version shares them,
    so a result whose bytes match is read without parsing names, dtypes and shapes again."""

    parts: tuple[bytes, ...]
    sizes: tuple[int, ...]
    outputs: tuple[tuple[str, str, tuple[int, ...]], ...]


_last_layout: list[OutputsLayout] = []  # the last one read, at most


def known_layout() -> OutputsLayout | None:
    """The outputs' layout of the last result read whole (schemas/inference_result_bulk.py reads
    others of that layout at once)."""
    return _last_layout[0] if _last_layout else None


def read_result_body(data: bytes) -> ResultBody | None:
    """The fields up to the attributes (the stage timestamps are not read), or None when `data`
    was written with another schema or may be a generation's (decode it whole).
    TruncatedRecordError when they do not parse."""
    read = _read_body(data)
    return None if read is None else read[0]


class ResultUsage(NamedTuple):
    """What a result adds to its job's usage: its length (tokens of a text, pixels of an image)
    and its share of its executed batch's engine time, in microseconds."""

    length: int
    engine_us: float


def read_result_usage(data: bytes) -> ResultUsage | None:
    """A result's usage, read from its bytes (the body, then the stage timestamps), or None when
    `data` was written with another schema or may be a generation's (decode it whole: its
    completion tokens count too)."""
    read = _read_body(data)
    if read is None:
        return None
    body, length, p = read
    try:
        timestamps: dict[str, int] = {} if data[p] == 0 else read_map(data, p, read_long)[0]
    except (IndexError, UnicodeDecodeError) as exc:
        raise TruncatedRecordError(f"{InferenceResult.SCHEMA} body is truncated or malformed: {exc}") from None
    return ResultUsage(length, engine_share_us(timestamps, body.batch_size))


def engine_share_us(timestamps: dict[str, int], batch_size: int) -> float:
    """A record's share of its executed batch's engine time: the batch's span, split evenly."""
    start, end = timestamps.get("inference_start"), timestamps.get("inference_end")
    if start is None or end is None or batch_size < 1:
        return 0.0
    return max(0, end - start) / batch_size


def _read_body(data: bytes) -> tuple[ResultBody, int, int] | None:
    """read_result_body, the result's length and where its stage timestamps start."""
    if not data.endswith(NOT_GENERATION) and not data.startswith(V1_HEADER):
        return None  # a generation's (or a value cut short): its fields lie past the timestamps
    read = _read_head(data)
    if read is None:
        return None
    head, p = read
    try:
        spans = _known_spans(data, p)
        if spans is not None:
            outputs, p = _last_layout[0].outputs, spans[-1][1]
        else:
            outputs, spans, p = _read_outputs(data, p)
        if data[p] != 0:
            return None  # a second block of outputs: valid Avro no writer of ours writes; decode it whole
        p += 1
        if data[p] == 0:
            labels: tuple[str, ...] = ()
            p += 1
        else:
            labels, p = _read_strings(data, p)
        batch_id, p = read_string(data, p)
        batch_size, p = read_long(data, p)
        length, p = read_long(data, p)
        _, p = read_long(data, p)  # padded_length
        if data[p] == 0:
            attributes: dict[str, str] = {}
            p += 1
        else:
            attributes, p = read_map(data, p, read_string)
    except (IndexError, UnicodeDecodeError) as exc:
        raise TruncatedRecordError(f"{InferenceResult.SCHEMA} body is truncated or malformed: {exc}") from None
    return ResultBody(head, outputs, spans, labels, batch_id, batch_size, attributes), length, p


def _known_spans(data: bytes, p: int) -> tuple[tuple[int, int], ...] | None:
    """The outputs' data spans when the outputs are laid out as the last result's were, else None."""
    if not _last_layout:
        return None
    layout = _last_layout[0]
    spans = []
    for part, size in zip(layout.parts, layout.sizes, strict=True):
        if not data.startswith(part, p):
            return None
        p += len(part)
        spans.append((p, p + size))
        p += size
    if p > len(data):
        return None
    return tuple(spans)


def _read_outputs(
    data: bytes, p: int
) -> tuple[tuple[tuple[str, str, tuple[int, ...]], ...], tuple[tuple[int, int], ...], int]:
    """The outputs array field by field, its data spans and its end (at the array's end marker);
    remembers its layout for the next result."""
    outputs: list[tuple[str, str, tuple[int, ...]]] = []
    parts: list[bytes] = []
    spans: list[tuple[int, int]] = []
    start = p
    count, p = read_count(data, p)
    if not count:
        return (), (), start
    for _ in range(count):
        name, dtype, dims, p, size = read_tensor(data, p)
        parts.append(data[start:p])
        spans.append((p, p + size))
        outputs.append((name, dtype, tuple(dims)))
        p = start = p + size
    _last_layout[:] = [OutputsLayout(tuple(parts), tuple(e - s for s, e in spans), tuple(outputs))]
    return tuple(outputs), tuple(spans), p


def _read_strings(data: bytes, p: int) -> tuple[tuple[str, ...], int]:
    items: list[str] = []
    n, p = read_count(data, p)
    while n:
        for _ in range(n):
            s, p = read_string(data, p)
            items.append(s)
        n, p = read_count(data, p)
    return tuple(items), p
