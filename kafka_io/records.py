"""Records in and out of the Kafka edge, as nearline's own types: what a stage consumed
(`ConsumedRecord`) and what it hands back to produce (`OutRecord`), plus the two headers every
job record carries. Kept free of client imports so pure code can build and read them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from schemas.packs import records_held

# Headers as either client gives them: confluent's list of pairs, or faust's mapping.
Headers = Sequence[tuple[str, bytes | None]] | dict[str, bytes | None]


TP = tuple[str, int]  # a partition: (topic, partition)


@dataclass(slots=True)
class OutRecord:
    """A record to produce. Read-only by convention: not frozen, because a frozen dataclass costs
    three times as much to make (~2 us on this VM), once per result on the GPU worker's hot path.
    `headers` may be a list that other records share (job_record's): never change it in place."""

    topic: str
    value: bytes | None  # None: a tombstone, which deletes the key from a compacted topic
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class ConsumedRecord:
    """A record read from a topic with where it came from: enough to process it, dead-letter it
    or commit past it. Read-only by convention: not frozen, because a frozen dataclass costs
    ~5 µs more to make, once per consumed record on the GPU worker's hot path."""

    topic: str
    partition: int
    offset: int
    value: bytes  # b"" for a tombstone: see `deleted`
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int = 0
    deleted: bool = False  # a tombstone (null value): the key is gone from a compacted topic

    @property
    def key_text(self) -> str:
        return (self.key or b"").decode("utf-8", "replace")

    @property
    def job_id(self) -> str | None:
        return job_of(self.headers)

    @property
    def records(self) -> int:
        """How many records it holds: a pack's `records` header, capped at what its bytes can hold,
        else 1 (schemas/packs.py: records_held)."""
        return records_held(records_of(self.headers), self.value)

    @property
    def submission(self) -> int | None:
        return submission_of(self.headers)


def job_record(topic: str, value: bytes, job_id: str, record_id: str, submission: int | None = None) -> OutRecord:
    """A record of a job as every stage writes it: key `job_id/record_id` (readers keep one per key),
    a `job_id` header and, from the submission on, a `submission` header (the submission's
    `submitted_at`, so a resubmitted job id is told apart from its cancelled predecessor);
    job_of() and submission_of() read them back without decoding the value."""
    headers = _HEADERS.get((job_id, submission))
    if headers is None:
        headers = [("job_id", job_id.encode())]
        if submission is not None:
            headers.append(("submission", str(submission).encode()))
        if len(_HEADERS) >= _HEADERS_KEPT:
            _HEADERS.clear()
        _HEADERS[(job_id, submission)] = headers
    return OutRecord(topic, value, f"{job_id}/{record_id}".encode(), headers)


# The headers of a job's records, by (job, submission): every result of a window shares them, and
# building the list cost more than the rest of a result's record. Shared, so never changed in place.
_HEADERS: dict[tuple[str, int | None], list[tuple[str, bytes]]] = {}
_HEADERS_KEPT = 256


def pack_record(
    topic: str, value: bytes, job_id: str, first_record_id: str, records: int, submission: int | None = None
) -> OutRecord:
    """A pack of `records` records of a job (schemas/packs.py) as every stage writes it: as
    job_record writes a record (keyed by the job and its first record, so a job's packs spread
    over partitions), with a `records` header that counts its records without decoding it."""
    out = job_record(topic, value, job_id, first_record_id, submission)
    out.headers = [*out.headers, (RECORDS_HEADER, str(records).encode())]  # job_record's list is shared
    return out


RECORDS_HEADER = "records"

# On a result the preprocess worker wrote from the model's results cache (docs/reuse.md): counted
# apart from computed ones by the readers that count a job's results without decoding them.
REUSED_HEADER = "reused"
# On every raw record of a job submitted with --no-reuse: its records are computed, never looked up
NO_REUSE_HEADER = "no-reuse"
# On a tensors record whose records missed the results cache: their reuse keys, REUSE_KEY_BYTES each,
# in the order the record holds them; the GPU worker caches each one's result under its key. A
# header, not an attribute: the records' own maps (and so their results' bytes) stay as they were.
REUSE_KEYS_HEADER = "reuse-keys"
REUSE_KEY_BYTES = 32
# The key of the one record in cache.<model> that is not a result: its value names the engine
# (reuse/keys.py CacheKeys' runtime) of the GPU worker that started last, written as it starts; the
# preprocess worker looks results up under that engine's cache keys (docs/reuse.md).
RUNTIME_RECORD_KEY = b"runtime"
# In the header, the place of a record that has no key (a sampled generation request without a
# seed: never reused, so never cached). No BLAKE2b digest is all zeros in practice.
NO_REUSE_KEY = bytes(REUSE_KEY_BYTES)


def with_reuse_keys(out: OutRecord, keys: Sequence[bytes | None]) -> OutRecord:
    """`out` carrying the reuse keys of the records it holds (REUSE_KEYS_HEADER), NO_REUSE_KEY for None."""
    joined = b"".join(NO_REUSE_KEY if key is None else key for key in keys)
    out.headers = [*out.headers, (REUSE_KEYS_HEADER, joined)]  # job_record's list is shared
    return out


def reuse_keys_of(headers: Headers | None, records: int) -> list[bytes | None] | None:
    """The reuse keys a tensors record carries for its `records` records (None for one without);
    None where it carries none, or a header of another length (written by something else: nothing
    is cached for it)."""
    value = header_of(headers, REUSE_KEYS_HEADER)
    if value is None or len(value) != records * REUSE_KEY_BYTES:
        return None
    keys: list[bytes | None] = [value[at : at + REUSE_KEY_BYTES] for at in range(0, len(value), REUSE_KEY_BYTES)]
    if NO_REUSE_KEY not in value:  # every record keyed (all but sampled requests): no second pass
        return keys
    return [None if key == NO_REUSE_KEY else key for key in keys]


def records_of(headers: Headers | None) -> int:
    """The records a Kafka record holds: its `records` header (a pack), else 1."""
    return _number(header_of(headers, RECORDS_HEADER)) or 1


def header_of(headers: Headers | None, name: str) -> bytes | None:
    """A header's value as it came (bytes), None when absent or null."""
    # Runs twice for every consumed record: a list is scanned, not made a dict, and the check is
    # against dict, not the Mapping ABC (4x slower).
    value = None
    if isinstance(headers, dict):
        value = headers.get(name)
    elif headers:
        for key, found in headers:
            if key == name:
                value = found
                break
    return value if isinstance(value, bytes) else None


def job_of(headers: Headers | None) -> str | None:
    """The job id a record carries in its `job_id` header (every stage's output has one); None for
    a header that is not UTF-8, as for none (the value's own job id decides): any producer may
    write one, and a reader that raised on it would fail on that record at every redelivery."""
    value = header_of(headers, "job_id")
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


# A number header longer than this is malformed: a submission is microseconds since the epoch (16
# digits), a pack's count far less; int() of a 4,301-digit one raises instead of answering.
_MAX_DIGITS = 19


def _number(value: bytes | None) -> int | None:
    return int(value) if value is not None and len(value) <= _MAX_DIGITS and value.isdigit() else None


def submission_of(headers: Headers | None) -> int | None:
    """The submission (its `submitted_at`) a record carries in its `submission` header; None for
    records written before submissions were told apart, or with a malformed header."""
    return _number(header_of(headers, "submission"))
