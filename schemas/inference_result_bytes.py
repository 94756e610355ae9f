"""InferenceResult records read directly from their bytes, for the readers that fold a whole job's
results (`submit --wait`, `status`, `results`).

fastavro's reader walks the parsed schema on every call (~7 us a MiniLM result here). A reader that
counts a job needs five leading fields: read_result_head() reads them and stops before the outputs
(~1 us). read_result() reads a whole result into an InferenceResult without fastavro's dicts.
Both read the current writer schema only; a record of another (an older result) goes through
serde.decode_fields, so a reader need not know which it got. A malformed record raises the
SerdeError fastavro's path raises (TruncatedRecordError), never IndexError.
schemas/avro/inference_result.avsc changing its fields' order must change this module too;
tests/schemas/test_inference_result_bytes.py would show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from schemas.avro_bytes import read_count, read_length, read_long, read_map, read_string
from schemas.errors import TruncatedRecordError
from schemas.records import InferenceResult, Tensor
from schemas.serde import HEADER_LEN, MAGIC, decode_fields, fingerprint_of


@cache
def _header() -> bytes:
    return MAGIC + fingerprint_of(InferenceResult.SCHEMA)


@dataclass(frozen=True)
class ResultHead:
    """A result's leading fields: enough to count it, keep one per record and pick its version."""

    job_id: str
    record_id: str
    seq: int
    model: str
    model_version: str


def read_result_head(data: bytes) -> ResultHead | None:
    """The leading fields, or None when `data` was written with another schema (decode it whole)."""
    if not data.startswith(_header()):
        return None
    try:
        job_id, p = read_string(data, HEADER_LEN)
        record_id, p = read_string(data, p)
        seq, p = read_long(data, p)
        model, p = read_string(data, p)
        version, p = read_string(data, p)
    except (IndexError, UnicodeDecodeError) as exc:
        raise TruncatedRecordError(f"{InferenceResult.SCHEMA} body is truncated or malformed: {exc}") from None
    return ResultHead(job_id, record_id, seq, model, version)


def read_result(data: bytes) -> InferenceResult:
    """The InferenceResult in `data` (decode(data, InferenceResult), without fastavro for ours)."""
    if not data.startswith(_header()):
        return InferenceResult.from_avro(decode_fields(data, InferenceResult))
    try:
        job_id, p = read_string(data, HEADER_LEN)
        record_id, p = read_string(data, p)
        seq, p = read_long(data, p)
        model, p = read_string(data, p)
        version, p = read_string(data, p)
        outputs: list[Tensor] = []
        count, p = read_count(data, p)
        while count:
            for _ in range(count):
                name, p = read_string(data, p)
                dtype, p = read_string(data, p)
                shape, p = _read_ints(data, p)
                n, p = read_length(data, p)
                if p + n > len(data):
                    raise IndexError(f"tensor {name!r} needs {n} bytes, {len(data) - p} left")
                outputs.append(Tensor(name, dtype, shape, data[p : p + n]))
                p += n
            count, p = read_count(data, p)
        labels: list[str] = []
        count, p = read_count(data, p)
        while count:
            for _ in range(count):
                label, p = read_string(data, p)
                labels.append(label)
            count, p = read_count(data, p)
        batch_id, p = read_string(data, p)
        batch_size, p = read_long(data, p)
        length, p = read_long(data, p)
        padded_length, p = read_long(data, p)
        attributes, p = read_map(data, p, read_string)
        timestamps, p = read_map(data, p, read_long)
    except (IndexError, UnicodeDecodeError) as exc:
        raise TruncatedRecordError(f"{InferenceResult.SCHEMA} body is truncated or malformed: {exc}") from None
    if p != len(data):
        raise TruncatedRecordError(
            f"{InferenceResult.SCHEMA} body has {len(data) - p} bytes after the end of the record"
        )
    return InferenceResult(
        job_id,
        record_id,
        seq,
        model,
        version,
        tuple(outputs),
        batch_id,
        batch_size,
        attributes,
        timestamps,
        tuple(labels),
        length,
        padded_length,
    )


def _read_ints(data: bytes, p: int) -> tuple[tuple[int, ...], int]:
    values: list[int] = []
    count, p = read_count(data, p)
    while count:
        for _ in range(count):
            v, p = read_long(data, p)
            values.append(v)
        count, p = read_count(data, p)
    return tuple(values), p
