"""The records that flow between stages, as dataclasses. serde.py turns them into bytes and back."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self

import numpy as np

from schemas.errors import TensorFormatError
from schemas.terms import JobTerms

# Only fixed-width numeric types cross the wire; object or string arrays cannot be rebuilt from bytes.
TENSOR_DTYPES = frozenset(
    {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "float16", "float32", "float64"}
)


def now_us() -> int:
    """Wall-clock microseconds since the epoch: the unit of every stage timestamp."""
    return time.time_ns() // 1000


_LITTLE = {name: np.dtype(name).newbyteorder("<") for name in TENSOR_DTYPES}
# The same by dtype: a dict lookup, where `dtype.name` costs microseconds a call on the hot path.
_NAME_OF_LITTLE = {little: name for name, little in _LITTLE.items()}


def tensor_array(name: str, dtype: str, shape: tuple[int, ...] | list[int], data: bytes | memoryview) -> np.ndarray:
    """A read-only view on a carried tensor's bytes (no copy), after checking they fit dtype and shape."""
    little = _LITTLE.get(dtype)
    if little is None:
        raise TensorFormatError(f"tensor {name!r}: unsupported dtype {dtype!r}")
    count = 1
    for d in shape:  # Python ints: a shape whose product overflows int64 is just too large
        if d < 0:
            raise TensorFormatError(f"tensor {name!r}: negative dimension in shape {list(shape)}")
        count *= d
    if count * little.itemsize != len(data):
        raise TensorFormatError(
            f"tensor {name!r}: {dtype}{list(shape)} needs {count * little.itemsize} bytes, record has {len(data)}"
        )
    try:
        return np.frombuffer(data, dtype=little).reshape(shape)
    except ValueError as exc:  # more dimensions than numpy's 64, or a dimension it cannot index
        shown = f"{list(shape)[:8]}"[:-1] + (", ...]" if len(shape) > 8 else "]")
        raise TensorFormatError(f"tensor {name!r}: {dtype}{shown} cannot be an array: {exc}") from None


@dataclass(frozen=True)
class Tensor:
    """A named array as it travels: little-endian, C order."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @classmethod
    def from_array(cls, name: str, array: np.ndarray) -> Tensor:
        dtype = _NAME_OF_LITTLE.get(array.dtype)
        if dtype is None:  # big-endian, or a dtype that cannot be carried
            if array.dtype.name not in TENSOR_DTYPES:
                raise TensorFormatError(f"tensor {name!r}: dtype {array.dtype} cannot be carried")
            dtype = array.dtype.name
            array = array.astype(_LITTLE[dtype])
        return cls(name, dtype, tuple(array.shape), array.tobytes())  # tobytes() is C order

    def to_array(self) -> np.ndarray:
        """A read-only view on the record's bytes (no copy), after checking they fit dtype and shape."""
        return tensor_array(self.name, self.dtype, self.shape, self.data)

    def to_avro(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "data": self.data}

    @classmethod
    def from_avro(cls, d: dict[str, Any]) -> Tensor:
        return cls(d["name"], d["dtype"], tuple(d["shape"]), d["data"])


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(record_type: type) -> tuple[str, ...]:
    """A record dataclass's field names; dataclasses.fields() rebuilds them on every call (~9 us),
    twice per record on the hot paths."""
    names = _FIELD_NAMES.get(record_type)
    if names is None:
        names = _FIELD_NAMES[record_type] = tuple(f.name for f in fields(record_type))
    return names


class AvroFields:
    """to_avro/from_avro for a record dataclass whose fields are its Avro fields, by the same names."""

    TENSOR_FIELDS: ClassVar[tuple[str, ...]] = ()
    TUPLE_FIELDS: ClassVar[tuple[str, ...]] = ()  # Avro arrays held as tuples, so records stay hashable

    def to_avro(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in field_names(type(self))}
        for name in self.TENSOR_FIELDS:
            d[name] = [t.to_avro() for t in d[name]]
        for name in self.TUPLE_FIELDS:
            d[name] = list(d[name])
        return d

    @classmethod
    def from_avro(cls, d: dict[str, Any]) -> Self:
        kwargs = {name: d[name] for name in field_names(cls)}
        for name in cls.TENSOR_FIELDS:
            kwargs[name] = tuple(Tensor.from_avro(t) for t in kwargs[name])
        for name in cls.TUPLE_FIELDS:
            kwargs[name] = tuple(kwargs[name])
        return cls(**kwargs)


@dataclass(frozen=True)
class RawText(AvroFields):
    SCHEMA: ClassVar[str] = "nearline.RawText"

    job_id: str
    record_id: str
    seq: int
    model: str
    text: str
    submitted_at: int
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RawImage(AvroFields):
    SCHEMA: ClassVar[str] = "nearline.RawImage"

    job_id: str
    record_id: str
    seq: int
    model: str
    image: bytes
    content_type: str
    source: str
    submitted_at: int
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TensorRecord(AvroFields):
    SCHEMA: ClassVar[str] = "nearline.TensorRecord"
    TENSOR_FIELDS = ("tensors",)

    job_id: str
    record_id: str
    seq: int
    model: str
    model_version: str
    tensors: tuple[Tensor, ...]
    attributes: dict[str, str] = field(default_factory=dict)
    timestamps: dict[str, int] = field(default_factory=dict)

    def arrays(self) -> dict[str, np.ndarray]:
        return {t.name: t.to_array() for t in self.tensors}


@dataclass(frozen=True)
class InferenceResult(AvroFields):
    SCHEMA: ClassVar[str] = "nearline.InferenceResult"
    TENSOR_FIELDS = ("outputs",)
    TUPLE_FIELDS = ("labels",)

    job_id: str
    record_id: str
    seq: int
    model: str
    model_version: str
    outputs: tuple[Tensor, ...]
    batch_id: str
    batch_size: int
    attributes: dict[str, str] = field(default_factory=dict)
    timestamps: dict[str, int] = field(default_factory=dict)
    labels: tuple[str, ...] = ()
    length: int = 0
    padded_length: int = 0
    text: str = ""  # a generation's completion (detokenized, the stop string cut)
    finish_reason: str = ""  # "stop" or "length": not "" is what makes a result a generation's
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0  # prompt tokens whose KV came from a shared prefix

    def arrays(self) -> dict[str, np.ndarray]:
        return {t.name: t.to_array() for t in self.outputs}


# A dead letter keeps at most this much of the payload it failed on (with the full size and a
# hash), and this much of the error text: it must fit under the record limit (16 MiB,
# kafka_io/limits.py) where the record that failed may not have. Any payload that was itself
# under the limit (every input submit lets through) is kept whole, so it can be replayed.
DEAD_LETTER_PAYLOAD_BYTES = 16 * 1024 * 1024 - 128 * 1024
ERROR_TEXT_CHARS = 4096


def capped_payload(payload: bytes) -> tuple[bytes, int | None, str | None]:
    """(payload kept, original size, sha256): the size and hash only when the payload was cut."""
    if len(payload) <= DEAD_LETTER_PAYLOAD_BYTES:
        return payload, None, None
    return payload[:DEAD_LETTER_PAYLOAD_BYTES], len(payload), hashlib.sha256(payload).hexdigest()


def capped_text(text: str) -> str:
    if len(text) <= ERROR_TEXT_CHARS:
        return text
    return f"{text[:ERROR_TEXT_CHARS]}... ({len(text):,} characters in all)"


@dataclass(frozen=True)
class DeadLetter(AvroFields):
    SCHEMA: ClassVar[str] = "nearline.DeadLetter"

    stage: str
    error_type: str
    error: str
    source_topic: str
    source_partition: int
    source_offset: int
    payload: bytes
    failed_at: int
    job_id: str | None = None
    record_id: str | None = None
    model: str | None = None
    model_version: str | None = None
    payload_size: int | None = None
    payload_sha256: str | None = None
    source_index: int | None = None  # the record's index in its source pack (schemas/packs.py)

    @property
    def truncated(self) -> bool:
        """Whether `payload` holds only the start of the source value (see payload_size)."""
        return self.payload_size is not None

    @classmethod
    def from_error(
        cls,
        stage: str,
        error: BaseException,
        source: tuple[str, int, int, bytes],
        *,
        job_id: str | None = None,
        record_id: str | None = None,
        model: str | None = None,
        model_version: str | None = None,
        index: int | None = None,
    ) -> DeadLetter:
        """The dead letter for a record that `error` stopped at `stage`; source is (topic, partition, offset, value).
        `index`: the record's index in the pack at that offset, whose value is then the record alone.

        Size-capped whatever the record and the error (kafka_io/limits.py): a dead letter must fit
        where the record that failed may not have."""
        topic, partition, offset, value = source
        payload, size, sha256 = capped_payload(value)
        return cls(
            stage,
            type(error).__name__,
            capped_text(str(error)),
            topic,
            partition,
            offset,
            payload,
            now_us(),
            job_id,
            record_id,
            model,
            model_version,
            size,
            sha256,
            index,
        )


class WithTerms(AvroFields):
    """A record with a `terms` field, written as the Avro fields labels, complete_within_s, notify
    and reuse (the registry's records stay flat: records written before the terms were one
    record read as they were)."""

    terms: JobTerms

    def to_avro(self) -> dict[str, Any]:
        d = super().to_avro()
        terms = d.pop("terms")
        d.update(
            labels=dict(terms.labels),
            complete_within_s=terms.complete_within_s,
            notify=terms.notify,
            reuse=terms.reuse,
        )
        return d

    @classmethod
    def from_avro(cls, d: dict[str, Any]) -> Self:
        terms = JobTerms(dict(d["labels"]), d["complete_within_s"], d["notify"], d["reuse"])
        return super().from_avro({**d, "terms": terms})


@dataclass(frozen=True)
class Job(WithTerms):
    SCHEMA: ClassVar[str] = "nearline.Job"

    job_id: str
    model: str
    input: str
    kind: str
    total: int
    submitted_at: int
    cancelled_at: int | None = None
    schedule: str | None = None
    error: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    submission: int | None = None
    columns: bytes | None = None  # kept input columns: an Arrow IPC schema (results/kept_columns.py)
    priority: str = "bulk"  # its lane, kafka_io.topology.Lane (schemas sit below kafka_io)
    terms: JobTerms = field(default_factory=JobTerms)
    deadline_at: int | None = None  # microseconds since the epoch (terms' window from the submission)

    def past_deadline(self) -> bool:
        """Whether its --complete-within window has passed (its records not yet run are skipped)."""
        return self.deadline_at is not None and now_us() > self.deadline_at


@dataclass(frozen=True)
class Schedule(WithTerms):
    SCHEMA: ClassVar[str] = "nearline.Schedule"

    name: str
    cron: str
    input: str
    model: str
    timezone: str
    misfire: str
    paused: bool
    active_since: int
    created_at: int
    columns: str | None = None  # JSON of producers.table_rows.Columns; None: the defaults
    priority: str = "bulk"  # the lane of the jobs it submits
    terms: JobTerms = field(default_factory=JobTerms)  # every job's it submits


@dataclass(frozen=True)
class ScheduleTick(AvroFields):
    SCHEMA: ClassVar[str] = "nearline.ScheduleTick"

    schedule: str
    tick_at: int
    job_id: str
    scheduler: str
    claim_id: str
    claimed_at: int


RECORD_TYPES: dict[str, type[AvroFields]] = {
    cls.SCHEMA: cls
    for cls in (RawText, RawImage, TensorRecord, InferenceResult, DeadLetter, Job, Schedule, ScheduleTick)
}


@dataclass(frozen=True)
class Notification(AvroFields):
    """One event of a job's webhook notification: a claim, a renewal, an attempt, its delivery or
    the notifier giving up (jobs/notifications/)."""

    SCHEMA: ClassVar[str] = "nearline.Notification"

    job_id: str
    submission: int
    kind: str  # claim, renew, attempt (failed), delivered or gave_up
    worker: str
    claim_id: str
    at: int
    url: str
    lease_ms: int = 0
    attempts: int = 0
    http_status: int | None = None
    error: str | None = None
    job_state: str | None = None


RECORD_TYPES[Notification.SCHEMA] = Notification
