"""Avro single-object encoding of the pipeline's records.

Framing (Avro spec, "single-object encoding"): C3 01, the 8-byte little-endian CRC-64-AVRO
fingerprint of the writer schema, then the binary body. A reader looks the fingerprint up among
the schemas shipped in schemas/avro (current versions) and schemas/avro/history (older writer
versions still readable) and resolves the writer schema to its current reader schema, so a field
can be added with a default without stopping the fleet.
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, ClassVar, Protocol, Self, TypeVar, cast

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from schemas.errors import (
    NotSingleObjectError,
    TruncatedRecordError,
    UnknownSchemaError,
    WrongRecordTypeError,
)

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8


class AvroRecord(Protocol):
    SCHEMA: ClassVar[str]

    def to_avro(self) -> dict[str, Any]: ...

    @classmethod
    def from_avro(cls, d: dict[str, Any]) -> Self: ...


R = TypeVar("R", bound=AvroRecord)


@dataclass(frozen=True)
class Schema:
    name: str
    parsed: Any
    fingerprint: bytes


class SchemaRegistry:
    """Every schema shipped with the package, by full name (current) and by fingerprint (any version)."""

    def __init__(self, current: list[dict[str, Any]], history: list[dict[str, Any]]) -> None:
        self._current: dict[str, Schema] = {}
        self._by_fingerprint: dict[bytes, Schema] = {}
        for raw in current:
            schema = _load(raw)
            if schema.name in self._current:
                raise ValueError(f"two current schemas named {schema.name}")
            self._current[schema.name] = self._by_fingerprint[schema.fingerprint] = schema
        for raw in history:
            schema = _load(raw)
            self._by_fingerprint.setdefault(schema.fingerprint, schema)

    def current(self, name: str) -> Schema:
        return self._current[name]

    def writer(self, fp: bytes) -> Schema:
        try:
            return self._by_fingerprint[fp]
        except KeyError:
            raise UnknownSchemaError(
                f"unknown writer schema fingerprint {fp.hex()}: not among the schemas shipped in schemas/avro"
            ) from None


def _load(raw: dict[str, Any]) -> Schema:
    parsed = cast(dict[str, Any], parse_schema(raw, named_schemas={}))
    canonical = to_parsing_canonical_form(parsed)
    return Schema(parsed["name"], parsed, bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO")))


def _read_dir(folder: Any) -> list[dict[str, Any]]:
    if not folder.is_dir():
        return []
    return [
        json.loads(f.read_text(encoding="utf-8"))
        for f in sorted(folder.iterdir(), key=lambda f: f.name)
        if f.name.endswith(".avsc")
    ]


@cache
def registry() -> SchemaRegistry:
    avro = resources.files("schemas") / "avro"
    return SchemaRegistry(_read_dir(avro), _read_dir(avro / "history"))


def encode(record: AvroRecord) -> bytes:
    schema = registry().current(record.SCHEMA)
    out = io.BytesIO()
    out.write(MAGIC)
    out.write(schema.fingerprint)
    schemaless_writer(out, schema.parsed, record.to_avro())
    return out.getvalue()


def decode(data: bytes, record_type: type[R]) -> R:
    """Bytes from a topic to a record, or a typed SerdeError that says what is wrong."""
    return decode_with(registry(), data, record_type)


def decode_with(schemas: SchemaRegistry, data: bytes, record_type: type[R]) -> R:
    return record_type.from_avro(decode_fields(data, record_type, schemas))


def decode_fields(data: bytes, record_type: type[AvroRecord], schemas: SchemaRegistry | None = None) -> dict[str, Any]:
    """The record's fields as Avro gives them (nested records as dicts), resolved to the current
    schema: for hot paths that would only take the record dataclass apart again."""
    schemas = schemas or registry()
    if len(data) < HEADER_LEN or data[:2] != MAGIC:
        raise NotSingleObjectError(
            f"not an Avro single-object record ({len(data)} bytes, starts with {data[:4].hex() or 'nothing'})"
        )
    writer = schemas.writer(bytes(data[2:HEADER_LEN]))
    if writer.name != record_type.SCHEMA:
        raise WrongRecordTypeError(f"expected a {record_type.SCHEMA} record, got a {writer.name}")
    reader = schemas.current(record_type.SCHEMA)
    body = io.BytesIO(data)  # shares the buffer; BytesIO(data[10:]) would copy every tensor byte
    body.seek(HEADER_LEN)
    try:
        fields = schemaless_reader(body, writer.parsed, None if reader is writer else reader.parsed)
    except (EOFError, ValueError, IndexError, UnicodeDecodeError, struct.error, TypeError) as exc:
        raise TruncatedRecordError(f"{writer.name} body is truncated or malformed: {exc}") from None
    if body.tell() != len(data):
        raise TruncatedRecordError(
            f"{writer.name} body has {len(data) - body.tell()} bytes after the end of the record"
        )
    return cast(dict[str, Any], fields)


def decode_any(data: bytes) -> Any:
    """Whichever pipeline record `data` holds, by its writer schema's name."""
    from schemas.records import RECORD_TYPES

    if len(data) < HEADER_LEN or data[:2] != MAGIC:
        raise NotSingleObjectError(f"not an Avro single-object record ({len(data)} bytes)")
    name = registry().writer(bytes(data[2:HEADER_LEN])).name
    if name not in RECORD_TYPES:
        raise WrongRecordTypeError(f"{name} is not a pipeline record")
    return decode(data, RECORD_TYPES[name])  # type: ignore[type-var]


def fingerprint_of(name: str) -> bytes:
    return registry().current(name).fingerprint
