"""A TensorRecord read straight from its single-object bytes: the GPU worker's hot path.

fastavro's schemaless_reader walks the parsed schema for every record and builds a dict per
record, per tensor and per map (~5 µs of a short text's record, most of the GPU worker's prepare
step). TensorRecord's layout is fixed, so it is read here field by field in the schema's order.
Two spans of the bytes come back as they are, because an InferenceResult repeats them: its first
three fields are the record's job_id, record_id and seq, and its last two the record's attributes
and (first blocks of) timestamps; schemas/result_encoding.py writes them without encoding them again.

Records of another writer schema (an older version, resolved to the current one) go through
serde.decode_fields. A malformed record raises the SerdeError serde.decode_fields raises
(tests/schemas/test_tensor_record_bytes.py holds the two readers to the same fields and errors);
a change to schemas/avro/tensor_record.avsc must change this module too, which that test shows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import TypeVar

from schemas.errors import TruncatedRecordError
from schemas.records import TensorRecord
from schemas.result_encoding import encoded_ids, encoded_maps
from schemas.serde import HEADER_LEN, MAGIC, decode_fields, fingerprint_of

V = TypeVar("V")

# (name, dtype, shape, data): data is a view on the record's own bytes, not a copy
RawTensor = tuple[str, str, list[int], memoryview]


@dataclass(slots=True)
class TensorRecordParts:
    """A TensorRecord's fields, and the encoded spans an InferenceResult of it repeats."""

    job_id: str
    record_id: str
    seq: int
    model: str
    model_version: str
    tensors: list[RawTensor]
    attributes: Mapping[str, str]  # read-only: records with the same maps share them
    timestamps: Mapping[str, int]
    ids: bytes  # job_id, record_id and seq as Avro writes them: result_encoding.encoded_ids
    maps: bytes  # the attributes map, then the timestamps' blocks without the map's end: encoded_maps


@cache
def _prefix() -> bytes:
    return MAGIC + fingerprint_of(TensorRecord.SCHEMA)


def read_tensor_record(data: bytes) -> TensorRecordParts:
    """The TensorRecord in `data`, or the typed SerdeError that says what is wrong with it."""
    if not data.startswith(_prefix()):
        return _resolved(data)
    try:
        return _read(data)
    except (IndexError, UnicodeDecodeError) as exc:
        raise _malformed(str(exc)) from None


def _malformed(why: str) -> TruncatedRecordError:
    return TruncatedRecordError(f"{TensorRecord.SCHEMA} body is truncated or malformed: {why}")


# Maps already read, by the record's bytes from the maps on (its end). Records of one preprocess
# batch share every stamp and most records have no attributes, so these bytes repeat from record
# to record (~34 distinct in a window of 512 short texts): read once, a record's maps cost a lookup.
_MAPS: dict[bytes, tuple[Mapping[str, str], Mapping[str, int]]] = {}
_MAPS_KEPT = 1024
_MAPS_LONGEST = 512  # bytes: longer ends (large attributes) are likely each a record's own


def _read(data: bytes) -> TensorRecordParts:
    """The fields from HEADER_LEN on. A slice past the end of `data` comes back short instead of
    raising; the maps' end is checked against len(data), which catches it.

    The first three fields are read without a call per field: a call costs about as much as
    reading a short string."""
    p = HEADER_LEN
    n = data[p]
    if n & 0x81:  # not a one-byte length of 0 to 63
        n, p = _length(data, p)
    else:
        n, p = n >> 1, p + 1
    job_id = data[p : p + n].decode()
    p += n
    n = data[p]
    if n & 0x81:
        n, p = _length(data, p)
    else:
        n, p = n >> 1, p + 1
    record_id = data[p : p + n].decode()
    p += n
    seq, p = _long(data, p)
    ids = data[HEADER_LEN:p]
    model, p = _string(data, p)
    model_version, p = _string(data, p)
    view = memoryview(data)
    tensors: list[RawTensor] = []
    count, p = _count(data, p)
    while count:
        for _ in range(count):
            name, p = _string(data, p)
            dtype, p = _string(data, p)
            shape: list[int] = []
            dims, p = _count(data, p)
            while dims:
                for _ in range(dims):
                    dim, p = _long(data, p)
                    shape.append(dim)
                dims, p = _count(data, p)
            size, p = _length(data, p)
            tensors.append((name, dtype, shape, view[p : p + size]))
            p += size
        count, p = _count(data, p)
    end = data[p:]
    maps = _MAPS.get(end)
    if maps is None:
        maps = _read_maps(data, p)
        if len(end) <= _MAPS_LONGEST:
            if len(_MAPS) >= _MAPS_KEPT:
                _MAPS.clear()
            _MAPS[end] = maps
    return TensorRecordParts(job_id, record_id, seq, model, model_version, tensors, *maps, ids, end[:-1])


def _read_maps(data: bytes, p: int) -> tuple[Mapping[str, str], Mapping[str, int]]:
    """The attributes and timestamps maps from p, which must end exactly at the record's end."""
    attributes, p = _read_map(data, p, _string)
    timestamps, p = _read_map(data, p, _long)
    if p > len(data):
        raise _malformed(f"{p - len(data)} bytes missing")
    if p < len(data):
        raise TruncatedRecordError(f"{TensorRecord.SCHEMA} body has {len(data) - p} bytes after the end of the record")
    return MappingProxyType(attributes), MappingProxyType(timestamps)


def _read_map(data: bytes, p: int, value: Callable[[bytes, int], tuple[V, int]]) -> tuple[dict[str, V], int]:
    """An Avro map from p (blocks of string keys and `value`s, a zero count ending it); its end."""
    read: dict[str, V] = {}
    count, p = _count(data, p)
    while count:
        for _ in range(count):
            key, p = _string(data, p)
            read[key], p = value(data, p)
        count, p = _count(data, p)
    return read, p


def _long(data: bytes, p: int) -> tuple[int, int]:
    """Avro's int/long at p (zig-zag varint, low group first), and the position after it."""
    b = data[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    z, shift = b & 0x7F, 7
    while b >= 0x80:
        p += 1
        b = data[p]
        z |= (b & 0x7F) << shift
        shift += 7
    if shift > 70:  # more than the 10 bytes of a 64-bit long
        raise IndexError(f"a varint of {shift // 7} bytes")
    return (z >> 1) ^ -(z & 1), p + 1


def _length(data: bytes, p: int) -> tuple[int, int]:
    """A string's or bytes' length at p."""
    n = data[p]
    if not n & 0x81:  # a one-byte length of 0 to 63
        return n >> 1, p + 1
    n, p = _long(data, p)
    if n < 0:
        raise IndexError(f"a negative length {n}")
    return n, p


def _string(data: bytes, p: int) -> tuple[str, int]:
    n = data[p]
    if n & 0x81:
        n, p = _length(data, p)
    else:
        n, p = n >> 1, p + 1
    return data[p : p + n].decode(), p + n


def _count(data: bytes, p: int) -> tuple[int, int]:
    """An array's or map's block count at p (0 ends it). A negative count is followed by the
    block's size in bytes (the spec allows writers that skip-index blocks): read, not needed."""
    n = data[p]
    if not n & 0x81:
        return n >> 1, p + 1
    n, p = _long(data, p)
    if n < 0:
        _, p = _long(data, p)
        n = -n
    return n, p


def _resolved(data: bytes) -> TensorRecordParts:
    """Another writer schema (or no TensorRecord at all): fastavro resolves it, or says why not."""
    f = decode_fields(data, TensorRecord)
    return TensorRecordParts(
        f["job_id"],
        f["record_id"],
        f["seq"],
        f["model"],
        f["model_version"],
        [(t["name"], t["dtype"], t["shape"], memoryview(t["data"])) for t in f["tensors"]],
        f["attributes"],
        f["timestamps"],
        encoded_ids(f["job_id"], f["record_id"], f["seq"]),
        encoded_maps(f["attributes"], f["timestamps"]),
    )
