"""An InferenceResult's leading fields read directly from its bytes, for the readers that count a
job's results (`submit --wait`, `status`).

fastavro's reader walks the parsed schema on every call (~8 us a MiniLM result here) where a count
needs five leading fields: read_result_head() reads them and stops before the outputs (~1.4 us).
The rest of the record is not read, so a result whose body is corrupt is counted here and
refused where it is decoded whole (`results`, `run`); the results topic is written only by GPU
workers, and Kafka checks every record batch's CRC. A whole result read this way in Python was
slower than fastavro (12.6 against 8 us), so whole results stay with fastavro. Records of another
writer schema give None: decode those whole. schemas/avro/inference_result.avsc changing its
leading fields must change this module too; tests/schemas/test_inference_result_bytes.py would
show it.
"""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

from schemas.avro_bytes import read_long, read_string
from schemas.errors import TruncatedRecordError
from schemas.records import InferenceResult
from schemas.serde import HEADER_LEN, MAGIC, fingerprint_of


@cache
def _header() -> bytes:
    return MAGIC + fingerprint_of(InferenceResult.SCHEMA)


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
