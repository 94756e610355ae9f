"""A RawText record's single-object bytes built directly, for `nearline submit`'s hot loop, and
read directly, for the preprocess worker's.

fastavro's schemaless_writer re-walks the parsed schema on every call (~25 us of a ~28 us encode
of a short text); RawText's layout is fixed and small (strings, longs, a map of strings), so its
Avro binary form is written here field by field, in the schema's order. The bytes are the same as
`encode(RawText(...))` gives (tests/schemas/test_raw_text_bytes.py holds them to that); a change to
schemas/avro/raw_text.avsc must change this module too, which that test would show.

Reading (read_raw_text) gives the fields. Records of another writer schema go through
serde.decode_fields; a malformed one raises the SerdeError it raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from schemas.avro_bytes import read_long, read_map, read_string
from schemas.errors import TruncatedRecordError
from schemas.records import RawText
from schemas.result_encoding import avro_long, avro_string, avro_string_map
from schemas.serde import HEADER_LEN, MAGIC, decode_fields, fingerprint_of

_FIELDS = ("job_id", "record_id", "seq", "model", "text", "attributes", "submitted_at")


@cache
def _header() -> bytes:
    return MAGIC + fingerprint_of(RawText.SCHEMA)


def raw_text_bytes(
    job_id: str, record_id: str, seq: int, model: str, text: str, submitted_at: int, attributes: dict[str, str]
) -> bytes:
    """encode(RawText(job_id, record_id, seq, model, text, submitted_at, attributes)), faster."""
    return RawTextBytes(job_id, model, submitted_at)(record_id, seq, text, attributes)


class RawTextBytes:
    """raw_text_bytes for the records of one submission: what they share (the header, job id, model
    and submission time) is encoded once, not once a record."""

    def __init__(self, job_id: str, model: str, submitted_at: int) -> None:
        self._head = _header() + avro_string(job_id)
        self._model = avro_string(model)
        self._tail = avro_long(submitted_at)

    def __call__(self, record_id: str, seq: int, text: str, attributes: dict[str, str]) -> bytes:
        # the map in one block of every entry, then the empty block that ends it, as fastavro writes it
        return b"".join(
            (
                self._head,
                avro_string(record_id),
                avro_long(seq),
                self._model,
                avro_string(text),
                avro_string_map(attributes),
                self._tail,
            )
        )


@dataclass(frozen=True, slots=True)
class RawTextParts:
    """A RawText's fields."""

    job_id: str
    record_id: str
    seq: int
    model: str
    text: str
    attributes: Mapping[str, str]
    submitted_at: int


def read_raw_text(data: bytes) -> RawTextParts:
    """The RawText in `data`, or the typed SerdeError that says what is wrong with it."""
    if not data.startswith(_header()):
        f = decode_fields(data, RawText)
        return RawTextParts(
            f["job_id"],
            f["record_id"],
            f["seq"],
            f["model"],
            f["text"],
            f["attributes"],
            f["submitted_at"],
        )
    try:
        job_id, p = read_string(data, HEADER_LEN)
        record_id, p = read_string(data, p)
        seq, p = read_long(data, p)
        model, p = read_string(data, p)
        text, p = read_string(data, p)
        attributes, p = read_map(data, p, read_string)
        submitted_at, p = read_long(data, p)
    except (IndexError, UnicodeDecodeError) as exc:
        raise TruncatedRecordError(f"{RawText.SCHEMA} body is truncated or malformed: {exc}") from None
    if p != len(data):
        raise TruncatedRecordError(f"{RawText.SCHEMA} body has {len(data) - p} bytes after the end of the record")
    return RawTextParts(job_id, record_id, seq, model, text, attributes, submitted_at)
