"""Packs: many records of one job submission and one lane in one Kafka record, column-wise
(schemas/avro/raw_text_pack.avsc, tensor_pack.avsc).

Every Kafka record costs the broker, the client and each poll loop about the same whatever it
holds: a short text's record cost faust's consumer alone about what tokenizing it costs
(docs/benchmarks.md). A pack pays that once for up to PackSettings.max_records texts. The envelope
goes through fastavro once a pack; inside it the columns are arrays (texts as Avro strings,
sequence numbers, token ids and their offsets as little-endian buffers read as numpy views), so no
record needs a Python object of its own until a stage wants one.

A pack's records stay records everywhere they are seen: results are one Kafka record per input
record, and a record of a pack that fails is dead-lettered alone, its payload the record as the
single RawText or TensorRecord (`single()`) that any reader of the topic takes, so `dlq replay`
sends it back as a record of its own. Readers tell packs from single records by the writer
schema's fingerprint (`kind_of`).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal, cast

import numpy as np
from fastavro import schemaless_reader, schemaless_writer

from schemas.errors import NotSingleObjectError, TensorFormatError, TruncatedRecordError
from schemas.packs_not_utf8 import (
    RAW_TEXT_PACK_FIELDS,
    TENSOR_PACK_FIELDS,
    Kind,
    raw_text_alone,
    read_not_utf8,
    tensor_record_alone,
)
from schemas.raw_text_bytes import raw_text_bytes
from schemas.records import TENSOR_DTYPES, Tensor, TensorRecord
from schemas.serde import HEADER_LEN, MAGIC, encode, registry

RAW_TEXT_PACK = "nearline.RawTextPack"
TENSOR_PACK = "nearline.TensorPack"

# A pack closes at this many records or this many bytes of payload, whichever comes first: large
# enough that a Kafka record's fixed costs vanish per text (64 texts a record cost faust 0.15 us a
# text against 35 us unpacked), small enough to stay far under Kafka's default 1 MB
# message.max.bytes with room for the envelope, and for a small job to be one pack.
PACK_RECORDS = 128
PACK_BYTES = 512 * 1024

_INT64 = np.dtype("<i8")

# Every record of a pack, of either kind, takes at least its 8-byte sequence number: a pack of n
# bytes holds at most n / 8 records, whatever its `records` header says.
MIN_RECORD_BYTES = 8


def records_held(claimed: int, value: bytes | None) -> int:
    """The records a Kafka record holds, its `records` header `claimed` capped at what its value's
    bytes can hold (at least 1): any producer may write the header, and one claiming
    9999999999999999999 records made every `submit --max-backlog` refuse until it was consumed."""
    if claimed <= 1:
        return 1
    return max(1, min(claimed, len(value or b"") // MIN_RECORD_BYTES))


@dataclass(frozen=True)
class PackSettings:
    """Where packs are cut: at max_records records or once max_bytes of payload are in."""

    max_records: int = PACK_RECORDS
    max_bytes: int = PACK_BYTES

    def __post_init__(self) -> None:
        if self.max_records < 1:
            raise ValueError(f"a pack holds at least 1 record, got max_records={self.max_records}")
        if self.max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {self.max_bytes}")


def pack_spans(sizes: Sequence[int], limits: PackSettings) -> list[tuple[int, int]]:
    """Contiguous [start, end) spans of records, each a pack: cut at max_records, and before the
    record that would take a pack past max_bytes (a record larger than that is a pack alone)."""
    spans: list[tuple[int, int]] = []
    start, held = 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start >= limits.max_records or held + size > limits.max_bytes):
            spans.append((start, i))
            start, held = i, 0
        held += size
    if start < len(sizes):
        spans.append((start, len(sizes)))
    return spans


@cache
def _schema(name: str) -> tuple[bytes, Any]:
    schema = registry().current(name)
    return MAGIC + schema.fingerprint, schema.parsed


def kind_of(data: bytes) -> Literal["RawTextPack", "TensorPack"] | None:
    """Which pack `data` holds, by its writer schema's fingerprint; None for anything else (a
    single record, or bytes no reader knows: the single record's reader says what is wrong)."""
    if data.startswith(_schema(TENSOR_PACK)[0]):
        return "TensorPack"
    if data.startswith(_schema(RAW_TEXT_PACK)[0]):
        return "RawTextPack"
    return None


def _write(name: str, fields: dict[str, Any]) -> bytes:
    header, parsed = _schema(name)
    out = io.BytesIO()
    out.write(header)
    schemaless_writer(out, parsed, fields)
    return out.getvalue()


def _read(name: str, data: bytes) -> dict[str, Any]:
    header, parsed = _schema(name)
    if not data.startswith(header):
        raise NotSingleObjectError(f"not a {name} ({len(data)} bytes, starts with {data[:10].hex() or 'nothing'})")
    body = io.BytesIO(data)
    body.seek(HEADER_LEN)
    try:
        fields = schemaless_reader(body, parsed, None)
    except (EOFError, ValueError, IndexError, UnicodeDecodeError, struct.error, TypeError) as exc:
        raise TruncatedRecordError(f"{name} body is truncated or malformed: {exc}") from None
    if body.tell() != len(data):
        raise TruncatedRecordError(f"{name} body has {len(data) - body.tell()} bytes after the end of the record")
    return cast(dict[str, Any], fields)


def _seqs(name: str, buffer: bytes, count: int) -> np.ndarray:
    if len(buffer) != 8 * count:
        raise TruncatedRecordError(f"{name}: {count} records but {len(buffer)} bytes of sequence numbers")
    return np.frombuffer(buffer, dtype=_INT64)


def _columns(name: str, record_ids: list[str], *others: tuple[str, Sequence[Any]]) -> None:
    for column, values in others:
        if len(values) != len(record_ids):
            raise TruncatedRecordError(f"{name}: {len(record_ids)} record ids but {len(values)} {column}")


# --- raw texts ---


@dataclass(frozen=True, slots=True)
class RawTextPack:
    """A RawTextPack's columns. `undecodable`: the records whose id, text or attributes are not
    UTF-8, each with why and its bytes alone as a single RawText; their columns hold what could
    be read, the bad bytes replaced (U+FFFD), so a reader of ids only never fails on them."""

    job_id: str
    model: str
    submitted_at: int
    record_ids: list[str]
    seqs: np.ndarray  # int64, read-only
    texts: list[str]
    attributes: list[dict[str, str]]
    undecodable: Mapping[int, tuple[str, bytes]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.record_ids)

    def single(self, i: int) -> bytes:
        """Record i alone, as the RawText any reader of raw.text takes (an undecodable one with
        its bytes as they came)."""
        if i in self.undecodable:
            return self.undecodable[i][1]
        return raw_text_bytes(
            self.job_id,
            self.record_ids[i],
            int(self.seqs[i]),
            self.model,
            self.texts[i],
            self.submitted_at,
            self.attributes[i],
        )


def raw_text_pack_bytes(
    job_id: str,
    model: str,
    submitted_at: int,
    record_ids: Sequence[str],
    seqs: Sequence[int],
    texts: Sequence[str],
    attributes: Sequence[Mapping[str, str]],
) -> bytes:
    if not len(record_ids) == len(seqs) == len(texts) == len(attributes):
        raise ValueError("a pack's columns must be of one length")
    return _write(
        RAW_TEXT_PACK,
        {
            "job_id": job_id,
            "model": model,
            "submitted_at": submitted_at,
            "record_ids": record_ids,
            "seqs": np.asarray(seqs, dtype=_INT64).tobytes(),
            "texts": texts,
            "attributes": attributes,
        },
    )


def read_raw_text_pack(data: bytes) -> RawTextPack:
    """The pack in `data`, or the SerdeError that says what is wrong with it. A pack whose records
    are whole but for strings that are not UTF-8 is read with those records undecodable
    (read_escaped_raw_text_pack), so each is dead-lettered alone and its neighbours go on."""
    f = _read_or_not_utf8(RAW_TEXT_PACK, data, RAW_TEXT_PACK_FIELDS)
    ids = f["record_ids"]
    _columns(RAW_TEXT_PACK, ids, ("texts", f["texts"]), ("attribute maps", f["attributes"]))
    seqs = _seqs(RAW_TEXT_PACK, f["seqs"], len(ids))
    undecodable = {i: (why, raw_text_alone(f, i, int(seqs[i]))) for i, why in f.get("undecodable", {}).items()}
    return RawTextPack(f["job_id"], f["model"], f["submitted_at"], ids, seqs, f["texts"], f["attributes"], undecodable)


def _read_or_not_utf8(name: str, data: bytes, fields: tuple[tuple[str, Kind], ...]) -> dict[str, Any]:
    """_read, or where it fails a pack whose only fault is records whose strings are not UTF-8,
    with those records undecodable (schemas/packs_not_utf8.py)."""
    try:
        return _read(name, data)
    except TruncatedRecordError:
        found = read_not_utf8(data, _schema(name)[0], fields)
        if found is None:
            raise
        return found


# --- token ids ---


@dataclass(frozen=True, slots=True)
class TensorPack:
    """A TensorPack's columns: record i's ids are ids[offsets[i]:offsets[i + 1]]. `undecodable`:
    as RawTextPack's (its records whose id or attributes are not UTF-8)."""

    job_id: str
    model: str
    model_version: str
    record_ids: list[str]
    seqs: np.ndarray  # int64, read-only
    tensor: str
    dtype: str
    offsets: np.ndarray  # int64, len(record_ids) + 1, read-only
    ids: np.ndarray  # every record's ids, read-only views on the pack's bytes
    attributes: list[dict[str, str]]
    timestamps: dict[str, int]
    undecodable: Mapping[int, tuple[str, bytes]] = field(default_factory=dict)  # as RawTextPack's

    def __len__(self) -> int:
        return len(self.record_ids)

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def array(self, i: int) -> np.ndarray:
        """Record i's ids: a view, no copy."""
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def single(self, i: int) -> bytes:
        """Record i alone, as the TensorRecord any reader of tensors.<model> takes (an undecodable
        one with its strings' bytes as they came)."""
        if i in self.undecodable:
            return self.undecodable[i][1]
        return encode(
            TensorRecord(
                self.job_id,
                self.record_ids[i],
                int(self.seqs[i]),
                self.model,
                self.model_version,
                (Tensor.from_array(self.tensor, self.array(i)),),
                self.attributes[i],
                self.timestamps,
            )
        )


@dataclass(frozen=True)
class PackHead:
    """What every record of a tensor pack shares: its job, model, tensor and stage stamps."""

    job_id: str
    model: str
    model_version: str
    tensor: str  # the model input the token ids feed
    timestamps: Mapping[str, int]


def tensor_pack_bytes(
    head: PackHead,
    record_ids: Sequence[str],
    seqs: Sequence[int] | np.ndarray,
    arrays: Sequence[np.ndarray],
    attributes: Sequence[Mapping[str, str]],
) -> bytes:
    """The pack of `arrays` (one 1-d array of token ids per record, all of one dtype)."""
    if not len(record_ids) == len(seqs) == len(arrays) == len(attributes):
        raise ValueError("a pack's columns must be of one length")
    if not arrays:
        raise ValueError("a pack holds at least one record")
    ids = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
    dtype = Tensor.from_array(head.tensor, ids[:0]).dtype  # the carried name; big-endian refused or swapped below
    little = ids.astype(np.dtype(dtype).newbyteorder("<"), copy=False)
    offsets = np.zeros(len(arrays) + 1, dtype=_INT64)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    return _write(
        TENSOR_PACK,
        {
            "job_id": head.job_id,
            "model": head.model,
            "model_version": head.model_version,
            "record_ids": record_ids,
            "seqs": np.asarray(seqs, dtype=_INT64).tobytes(),
            "tensor": head.tensor,
            "dtype": dtype,
            "offsets": offsets.tobytes(),
            "data": little.tobytes(),
            "attributes": attributes,
            "timestamps": head.timestamps,
        },
    )


def read_tensor_pack(data: bytes) -> TensorPack:
    """The pack in `data`, or the SerdeError that says what is wrong with it: its columns must
    agree in length, and its offsets must cut its data into one slice per record."""
    f = _read_or_not_utf8(TENSOR_PACK, data, TENSOR_PACK_FIELDS)
    ids = f["record_ids"]
    _columns(TENSOR_PACK, ids, ("attribute maps", f["attributes"]))
    seqs = _seqs(TENSOR_PACK, f["seqs"], len(ids))
    dtype = f["dtype"]
    if dtype not in TENSOR_DTYPES:
        raise TensorFormatError(f"{TENSOR_PACK}: unsupported dtype {dtype!r}")
    little = np.dtype(dtype).newbyteorder("<")
    if len(f["data"]) % little.itemsize:
        raise TensorFormatError(f"{TENSOR_PACK}: {len(f['data'])} bytes of data is not a whole number of {dtype}")
    values = np.frombuffer(f["data"], dtype=little)
    if len(f["offsets"]) != 8 * (len(ids) + 1):
        raise TruncatedRecordError(f"{TENSOR_PACK}: {len(ids)} records need {len(ids) + 1} offsets")
    offsets = np.frombuffer(f["offsets"], dtype=_INT64)
    if offsets[0] != 0 or offsets[-1] != len(values) or (len(offsets) > 1 and bool((np.diff(offsets) < 0).any())):
        raise TensorFormatError(f"{TENSOR_PACK}: offsets do not cut its {len(values)} ids into one slice per record")
    undecodable = {
        i: (why, tensor_record_alone(f, i, int(seqs[i]), values[offsets[i] : offsets[i + 1]]))
        for i, why in f.get("undecodable", {}).items()
    }
    return TensorPack(
        f["job_id"],
        f["model"],
        f["model_version"],
        ids,
        seqs,
        f["tensor"],
        dtype,
        offsets,
        values,
        f["attributes"],
        f["timestamps"],
        undecodable,
    )


def unpacked(data: bytes) -> list[bytes]:
    """The single records a Kafka value stands for: a pack's records each as the single record's
    bytes it carries them for (RawText or TensorRecord, .single), in the pack's order; anything
    else is itself. A pack that does not read raises its SerdeError."""
    kind = kind_of(data)
    if kind is None:
        return [data]
    pack = read_raw_text_pack(data) if kind == "RawTextPack" else read_tensor_pack(data)
    return [pack.single(i) for i in range(len(pack))]
