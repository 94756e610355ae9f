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

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from schemas.avro_bytes import read_count as _count
from schemas.avro_bytes import read_length as _length
from schemas.avro_bytes import read_long as _long
from schemas.avro_bytes import read_map as _read_map
from schemas.avro_bytes import read_string as _string
from schemas.avro_bytes import read_tensor as _read_tensor
from schemas.errors import TruncatedRecordError
from schemas.records import TensorRecord
from schemas.result_encoding import encoded_ids, encoded_maps
from schemas.serde import HEADER_LEN, MAGIC, decode_fields, fingerprint_of

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
            name, dtype, shape, p, size = _read_tensor(data, p)
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
