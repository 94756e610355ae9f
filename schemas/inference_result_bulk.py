"""Many InferenceResults' bodies read from their bytes at once, with numpy, for `results`.

read_result_body (schemas/inference_result_bytes.py) costs ~4 us a result in Python calls: a
varint, a string, a comparison at a time. The results of one job come from GPU workers that all
write the same layout: the same job, model and version, the same outputs (names, dtypes, shapes),
no labels for an embedding, mostly no attributes. Here a batch of results is joined into one
buffer and each field is read for all of them in one numpy operation; only what an output line
needs as a Python object (the record id, the batch id) is made per result.

A result whose bytes do not follow that layout (another writer schema, labels, attributes,
another model or layout, a generation's fields, a truncated or malformed value) is not read
here: its place in the answer is None, and the caller reads it alone with read_result_body,
which gives it the same answer or the same error. What is read here is exactly what
read_result_body reads (tests/schemas/test_inference_result_bulk.py compares them on fuzzed
values).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from schemas.inference_result_bytes import (
    OutputsLayout,
    ResultBody,
    ResultHead,
    known_layout,
    read_result_body,
    result_header,
    result_headers,
)
from schemas.result_encoding import NOT_GENERATION
from schemas.serde import HEADER_LEN

# Below this many results the per-result reader is as quick: numpy's fixed cost per call
# (~1 us) times the ~40 calls of a batch is ~40 us.
MIN_BATCH = 16
_MAX_VARINT = 10  # bytes of a 64-bit zig-zag long
_PASSES = 3  # layouts tried on one batch
_EXAMPLES = 8  # results tried as a pass's example
MAX_COMPARED = 512  # bytes of a field compared at once (a job id, a model version, an outputs' layout)


class _Buffer:
    """The values joined, read at an array of positions (one per value) at a time. Reads past a
    value's end mark it not ok rather than raise; the buffer is padded so no read leaves it."""

    def __init__(self, values: Sequence[bytes]) -> None:
        lengths = np.fromiter((len(v) for v in values), np.int64, len(values))
        self.starts = np.zeros(len(values), np.int64)
        np.cumsum(lengths[:-1], out=self.starts[1:])
        self.ends = self.starts + lengths
        self.joined = b"".join([*values, bytes(_MAX_VARINT + 1)])
        self.size = int(self.ends[-1]) if len(values) else 0
        self.bytes = np.frombuffer(self.joined, np.uint8)
        self.ok = np.ones(len(values), bool)

    def byte(self, p: np.ndarray) -> np.ndarray:
        self.ok &= (p >= 0) & (p < self.ends)
        return self.bytes[np.clip(p, 0, self.size)]

    def long(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Avro's zig-zag varint at each p, and the positions after them."""
        b = self.byte(p).astype(np.uint64)
        z = b & 0x7F
        more = b >= 0x80
        n = np.ones(len(p), np.int64)
        shift = 7
        while more.any():
            if shift >= 7 * _MAX_VARINT:
                self.ok &= ~more  # longer than a 64-bit long: read_result_body says why
                break
            b = self.byte(p + n).astype(np.uint64)
            z |= np.where(more, (b & 0x7F) << np.uint64(shift), 0).astype(np.uint64)
            n += more
            more &= b >= 0x80
            shift += 7
        value = (z >> np.uint64(1)).astype(np.int64) ^ -(z & 1).astype(np.int64)
        return value, p + n

    def string(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each string's start and end (its bytes not checked as UTF-8 here)."""
        n, p = self.long(p)
        self.ok &= (n >= 0) & (n <= self.ends - p)  # not p + n: a damaged length may overflow it
        n = np.where(self.ok, n, 0)
        return p, p + n

    def same(self, p: np.ndarray, expected: bytes) -> np.ndarray:
        """Whether the bytes at each p are `expected`, each within its value."""
        if not expected:
            return np.ones(len(p), bool)
        window = p[:, None] + np.arange(len(expected))
        self.ok &= (p >= 0) & (p <= self.ends - len(expected))
        return np.all(self.bytes[np.clip(window, 0, self.size)] == np.frombuffer(expected, np.uint8), axis=1)

    def texts(self, start: np.ndarray, end: np.ndarray) -> list[str | None]:
        """Each string, None where it is not UTF-8 (read_result_body says why)."""
        joined = self.joined
        pairs = list(zip(start.tolist(), end.tolist(), strict=True))
        try:
            return [joined[s:e].decode() for s, e in pairs]
        except UnicodeDecodeError:
            return [_text(joined[s:e]) for s, e in pairs]


def _text(data: bytes) -> str | None:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def read_result_bodies(values: Sequence[bytes]) -> list[ResultBody | None]:
    """read_result_body of each value where the batch's common layout lets numpy read it; None
    where it does not (read that one alone: read_result_body answers, or raises, for it). The
    layout is the first readable result's; what it leaves gets a second and a third pass (a job
    reprocessed with another model version, or by workers of two schema versions, holds results
    of two layouts)."""
    bodies: list[ResultBody | None] = [None] * len(values)
    headers = result_headers()
    left = [i for i, v in enumerate(values) if v.startswith(headers)]
    for _ in range(_PASSES):
        if len(left) < MIN_BATCH:
            break
        example = _example([values[i] for i in left[:_EXAMPLES]])
        if example is None:
            break
        read = _read([values[i] for i in left], *example)
        for i, body in zip(left, read, strict=True):
            bodies[i] = body
        left = [i for i, body in zip(left, read, strict=True) if body is None]
    return bodies


def _example(values: Sequence[bytes]) -> tuple[bytes, ResultBody, OutputsLayout] | None:
    """The first of values that read_result_body reads as the bulk reader can read others like it
    (outputs, no labels, no attributes): its header, body and outputs' layout."""
    for value in values:
        try:
            body = read_result_body(value)
        except ValueError:  # TruncatedRecordError: the next one may do
            continue
        layout = known_layout()
        if body is None or layout is None or not body.outputs or layout.outputs != body.outputs:
            continue
        if body.labels or body.attributes or not _compact(body, layout):
            continue
        return value[:HEADER_LEN], body, layout
    return None


def _compact(body: ResultBody, layout: OutputsLayout) -> bool:
    """Whether the bytes every other result is compared against are short: each comparison gathers
    a matrix of records x bytes, and one result of a 500 KB model version (anyone may write to the
    results topic) made that 8 GB. Such an example is passed over; such a result is read alone."""
    head = body.head
    fixed = [head.job_id.encode(), head.model.encode(), head.model_version.encode(), *layout.parts]
    return all(len(part) <= MAX_COMPARED for part in fixed)


def _read(
    values: Sequence[bytes], header: bytes, example: ResultBody, layout: OutputsLayout
) -> list[ResultBody | None]:
    buf = _Buffer(values)
    ok = buf.same(buf.starts, header)
    if header == result_header():  # as read_result_body: the generation fields at their defaults
        ok &= buf.same(buf.ends - len(NOT_GENERATION), NOT_GENERATION)
    head = example.head
    job_id = head.job_id.encode()
    p = buf.starts + len(header)
    s, p = buf.string(p)
    ok &= buf.same(s, job_id) & (p - s == len(job_id))
    id_start, id_end = buf.string(p)
    seq, p = buf.long(id_end)
    for text in (head.model.encode(), head.model_version.encode()):
        s, p = buf.string(p)
        ok &= buf.same(s, text) & (p - s == len(text))
    data_starts = []
    for part, size in zip(layout.parts, layout.sizes, strict=True):
        ok &= buf.same(p, part)
        p = p + len(part)
        data_starts.append(p)
        p = p + size
        ok &= p <= buf.ends
    ok &= buf.same(p, b"\x00\x00")  # the outputs' end, and no labels
    batch_start, batch_end = buf.string(p + 2)
    batch_size, p = buf.long(batch_end)
    _, p = buf.long(p)  # length
    _, p = buf.long(p)  # padded_length
    ok &= buf.same(p, b"\x00")  # no attributes
    ok &= buf.ok
    rows = np.flatnonzero(ok)
    record_ids = buf.texts(id_start[rows], id_end[rows])
    batch_ids = buf.texts(batch_start[rows], batch_end[rows])
    bodies: list[ResultBody | None] = [None] * len(values)
    # each output's data span within its value, as read_result_body gives them
    spans = _spans([(d - buf.starts)[rows].tolist() for d in data_starts], layout.sizes)
    job, model, version, outputs = head.job_id, head.model, head.model_version, example.outputs
    for i, record_id, s, batch_id, size, span in zip(
        rows.tolist(), record_ids, seq[rows].tolist(), batch_ids, batch_size[rows].tolist(), spans, strict=True
    ):
        if record_id is not None and batch_id is not None:
            bodies[i] = ResultBody(ResultHead(job, record_id, s, model, version), outputs, span, (), batch_id, size, {})
    return bodies


def _spans(starts: list[list[int]], sizes: tuple[int, ...]) -> list[tuple[tuple[int, int], ...]]:
    """Each result's spans from each output's data starts: made in one comprehension for the one
    output of an embedding (a generator a result cost ~0.5 us)."""
    if len(starts) == 1:
        size = sizes[0]
        return [((a, a + size),) for a in starts[0]]
    return [tuple((a, a + n) for a, n in zip(row, sizes, strict=True)) for row in zip(*starts, strict=True)]
