"""A RawText record's single-object bytes built directly, for `nearline submit`'s hot loop.

fastavro's schemaless_writer re-walks the parsed schema on every call (~25 us of a ~28 us encode
of a short text); RawText's layout is fixed and small (strings, longs, a map of strings), so its
Avro binary form is written here field by field, in the schema's order. The bytes are the same as
`encode(RawText(...))` gives (tests/schemas/test_raw_text_bytes.py holds them to that); a change to
schemas/avro/raw_text.avsc must change this module too, which that test would show.
"""

from __future__ import annotations

from functools import cache

from schemas.serde import MAGIC, fingerprint_of

_RAW_TEXT = "nearline.RawText"
_FIELDS = ("job_id", "record_id", "seq", "model", "text", "attributes", "submitted_at")


@cache
def _header() -> bytes:
    return MAGIC + fingerprint_of(_RAW_TEXT)


def _long(n: int) -> bytes:
    """Avro's zig-zag varint of a long."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return bytes((z,))
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _string(s: str) -> bytes:
    data = s.encode("utf-8")
    return _long(len(data)) + data


def raw_text_bytes(
    job_id: str, record_id: str, seq: int, model: str, text: str, submitted_at: int, attributes: dict[str, str]
) -> bytes:
    """encode(RawText(job_id, record_id, seq, model, text, submitted_at, attributes)), faster."""
    return RawTextBytes(job_id, model, submitted_at)(record_id, seq, text, attributes)


class RawTextBytes:
    """raw_text_bytes for the records of one submission: what they share (the header, job id, model
    and submission time) is encoded once, not once a record."""

    def __init__(self, job_id: str, model: str, submitted_at: int) -> None:
        self._head = _header() + _string(job_id)
        self._model = _string(model)
        self._tail = _long(submitted_at)

    def __call__(self, record_id: str, seq: int, text: str, attributes: dict[str, str]) -> bytes:
        parts = [self._head, _string(record_id), _long(seq), self._model, _string(text)]
        if attributes:  # one block of every entry, then the empty block that ends the map, as fastavro writes it
            parts.append(_long(len(attributes)))
            for key, value in attributes.items():
                parts.append(_string(key))
                parts.append(_string(value))
        parts.append(b"\x00")
        parts.append(self._tail)
        return b"".join(parts)
