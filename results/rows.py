"""A job's records written out from their encoded values, a chunk at a time: what `results`
spends a record on.

A record is not decoded whole into a dict and an InferenceResult with its outputs rounded and
written one by one: a chunk of results whose outputs share one layout
(every result of one model version) has each output's data joined into one matrix, converted
and rounded in one numpy call, and each line is a small dict of a matrix row given to orjson; a
Parquet or Arrow row group takes the row views as they are. The lines and columns are the same
as results/outcome.to_json's and results/columnar.ResultColumns.add's (tested byte for byte); a record
that does not fit the chunk's layout (labels, another model version's outputs, a scalar output,
a generation's text, a dead letter, another writer schema) is decoded whole and written that way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import numpy as np

from results.kept_columns import KeptColumns
from results.outcome import dumps_line, finish_line, json_line, rounded
from results.output import write_lines, write_table
from schemas import DeadLetter, InferenceResult, decode
from schemas.attributes import REUSED_STAMP
from schemas.errors import TensorFormatError
from schemas.inference_result_bytes import ResultBody, read_result_body, read_result_head
from schemas.records import now_us, tensor_array

if TYPE_CHECKING:
    from results.columnar import OpenTable

log = logging.getLogger(__name__)

# Records a chunk: a matrix of 1,024 MiniLM embeddings is 1.5 MiB in float32 (3 MiB rounded).
CHUNK = 1024
# Lines joined before a write: ~70 KiB of MiniLM lines a write(), not one write a 4.4 KiB line.
# Under malloc's mmap threshold (128 KiB by default) on purpose: 1 MiB joins came from fresh mmapped pages
# and page faults ate the gain. Writing 20,000 lines on the 2-core EPYC: text file, a write a
# line ~5.5-6.3 us a line (user + sys), binary a write a line ~3.7, 16 lines a write ~1.6.
_LINES_PER_WRITE = 16


class OutputRow(NamedTuple):
    """A record as it waits to be written: its encoded value, whether it is a dead letter, and its
    result's body when it was read already (None: read it here)."""

    value: bytes
    dead: bool
    body: ResultBody | None

    def item(self) -> InferenceResult | DeadLetter:
        """The record decoded whole: a result that cannot be written becomes an error of its own."""
        if self.dead:
            return decode(self.value, DeadLetter)
        try:
            return writable_result(self.value)
        except ValueError as exc:
            return unwritable(self.value, exc)


def writable_result(value: bytes) -> InferenceResult:
    """A result decoded whole and checked as writing it needs: each output's data as its dtype and
    shape say, a classifier's top_index and top_score (a generation writes its text, not those).
    ValueError (a SerdeError, numpy's) if not: the results topic takes any producer's bytes, and
    one record must not fail a job's output."""
    result = decode(value, InferenceResult)
    arrays = result.arrays()
    if result.labels and not result.finish_reason and not {"top_index", "top_score"} <= arrays.keys():
        raise TensorFormatError(f"labels without top_index and top_score outputs (it has {sorted(arrays)})")
    return result


def unwritable(value: bytes, error: ValueError) -> DeadLetter:
    """A result that cannot be written, as an error row of the output (stage `results`), said on
    stderr: the job's other records are written as they are."""
    try:
        head = read_result_head(value)
    except ValueError:
        head = None
    job_id, record_id, model = (head.job_id, head.record_id, head.model) if head else (None, None, None)
    log.warning(
        "record %s of job %s: its result cannot be written (%s); an error line instead", record_id, job_id, error
    )
    return DeadLetter(
        "results",
        type(error).__name__,
        f"the result cannot be written: {error}",
        "",
        0,
        -1,
        b"",
        now_us(),
        job_id=job_id,
        record_id=record_id,
        model=model,
    )


def _chunks(rows: Iterable[OutputRow]) -> Iterator[list[OutputRow]]:
    chunk: list[OutputRow] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# A reused result's `reused` stamp as Avro writes a map key (its length, zigzag, then the bytes):
# such a result is decoded whole, so its line says "reused" (to_json). Another field holding these
# bytes only sends its record the slower way.
REUSED_MARK = bytes([2 * len(REUSED_STAMP)]) + REUSED_STAMP.encode()


def _body(row: OutputRow) -> ResultBody | None:
    """The row's result body when it can be written from its bytes (a vector or larger outputs,
    no labels, not reused), else None."""
    if row.dead or REUSED_MARK in row.value:
        return None
    body = row.body if row.body is not None else read_result_body(row.value)
    if body is None or body.labels or not body.outputs or any(not shape for _, _, shape in body.outputs):
        return None
    return body


def _matrices(
    chunk: list[OutputRow], bodies: list[ResultBody | None], for_json: bool
) -> tuple[list[int], list[np.ndarray]]:
    """The chunk's rows whose outputs share the first such row's layout, and each output as one
    matrix of theirs ([rows, *shape]): float64 rounded to 8 decimals for JSON (as JSON Lines
    writes them), else in their own dtype."""
    first = next((b for b in bodies if b is not None), None)
    if first is None:
        return [], []
    layout = first.outputs
    members = [i for i, b in enumerate(bodies) if b is not None and b.outputs == layout]
    matrices = []
    for k, (name, dtype, shape) in enumerate(layout):
        joined = b"".join([memoryview(chunk[i].value)[slice(*bodies[i].spans[k])] for i in members])  # type: ignore[union-attr]
        count = int(np.prod(shape, dtype=np.int64)) * len(members)
        try:
            matrix = tensor_array(name, dtype, (count,), joined).reshape((len(members), *shape))
        except ValueError:  # data that does not fit its own dtype and shape: each row is written alone
            return [], []
        matrices.append(rounded(matrix) if for_json else matrix)
    return members, matrices


def jsonl_lines(chunk: list[OutputRow], kept: KeptColumns | None) -> list[bytes]:
    """The chunk's lines, in its order."""
    bodies = [_body(row) for row in chunk]
    members, matrices = _matrices(chunk, bodies, for_json=True)
    lines: list[bytes | None] = [None] * len(chunk)
    if members:
        names = [name for name, _, _ in bodies[members[0]].outputs]  # type: ignore[union-attr]
        for j, i in enumerate(members):
            body = bodies[i]
            assert body is not None
            head = body.head
            line: dict[str, Any] = {"id": head.record_id, "job_id": head.job_id, "model": head.model}
            for name, matrix in zip(names, matrices, strict=True):
                line[name] = matrix[j]
            lines[i] = dumps_line(finish_line(line, head.model_version, body.attributes, kept))
    return [line if line is not None else json_line(row.item(), kept) for line, row in zip(lines, chunk, strict=True)]


def write_jsonl_rows(rows: Iterable[OutputRow], write: Any, kept: KeptColumns | None) -> int:
    """Every row as a JSON line, through write(bytes); returns the lines."""
    n = 0
    for chunk in _chunks(rows):
        lines = jsonl_lines(chunk, kept)
        for start in range(0, len(lines), _LINES_PER_WRITE):
            write(b"".join(lines[start : start + _LINES_PER_WRITE]))
        n += len(lines)
    return n


def write_columnar_rows(
    rows: Iterable[OutputRow],
    example: InferenceResult | None,
    out: IO[bytes],
    table: OpenTable,
    kept: KeptColumns | None,
) -> int:
    """The rows to out as Parquet (zstd) or an Arrow IPC file, ROW_GROUP_ROWS rows at a time
    (results/columnar.py): results of the example's layout as row views of one matrix a chunk,
    others decoded whole; example (any result of the job, None if it has none) sets the columns,
    and kept adds the input's kept columns. Returns the rows written."""
    from results.columnar import ResultColumns, RowGroups

    columns = ResultColumns(example, kept)
    with RowGroups(columns, out, table) as groups:
        for chunk in _chunks(rows):
            bodies = [_body(row) for row in chunk]
            members, matrices = _matrices(chunk, bodies, for_json=False) if columns.tensors else ([], [])
            fits = bool(members) and columns.fits(bodies[members[0]].outputs)  # type: ignore[union-attr]
            fast = dict(zip(members, range(len(members)), strict=True)) if fits else {}
            for i, row in enumerate(chunk):
                j = fast.get(i)
                body = bodies[i]
                if j is not None and body is not None:
                    columns.add_body(body, [matrix[j] for matrix in matrices])
                else:
                    columns.add(row.item())
                groups.added()
    return groups.written


def write_rows(
    rows: Iterable[OutputRow],
    example: InferenceResult | None,
    path: Path | None,
    out: IO[str],
    table: OpenTable | None = None,
    kept: KeptColumns | None = None,
) -> int:
    """Every row, in the order given, as JSON Lines to path or out (results.output.write_lines),
    or, given table, to the columnar file it opens at path; example is any result of the job (it
    sets columnar output's columns), kept the input columns the job keeps. Returns the records
    written."""
    if table is None:
        return write_lines(path, out, lambda write: write_jsonl_rows(rows, write, kept))
    return write_table(path, lambda f: write_columnar_rows(rows, example, f, table, kept))
