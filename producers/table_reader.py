"""A table file read a batch of rows at a time: what a Parquet footer, an Arrow schema or a CSV
header says the columns are, and the needed columns' values, batch by batch. Memory is one batch
(one Parquet row group at most), whatever the file's size. Each format is a Table subclass in a
module of its own (parquet.py, arrow_ipc.py, csv_tables.py), named in producers/formats.py;
which paths are tables is tables.py's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from producers.temporal import column_values

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 8192  # rows per batch of a text table: to_pylist per batch, never per file
IMAGE_BATCH_ROWS = 64  # an image table's rows can be megabytes each


class TableError(ValueError):
    """The file cannot be read as a table of its format; the message says why (no path in it)."""


@dataclass(frozen=True)
class Chunk:
    """Some rows of a table: the needed columns' values, the number of each row for messages, and
    rows that could not be read (index -> why: a ragged CSV line)."""

    columns: dict[str, list[Any]]
    numbers: Sequence[int]
    bad: dict[int, str] = field(default_factory=dict)


class Table:
    """One open table file: its schema at once, its rows as chunks on demand. A subclass reads one
    format: its schema and its record batches (Arrow-backed), or its own chunks (CSV)."""

    title = "table"  # the format as messages name it: "not a readable Parquet file"
    unit = "row"  # what a chunk's numbers count

    def __init__(self, path: Path) -> None:
        import pyarrow as pa

        self.path = path
        try:
            self.schema = self._schema()
        except (pa.ArrowException, OSError) as exc:
            raise TableError(f"not a readable {self.title} file: {arrow_message(exc)}") from None

    def _schema(self) -> pa.Schema:
        raise NotImplementedError

    def _batches(self, names: Sequence[str], rows: int) -> Iterator[pa.RecordBatch]:
        """The named columns in record batches of at most `rows` rows."""
        raise NotImplementedError

    def chunks(self, names: Sequence[str], rows: int) -> Iterator[Chunk]:
        """The named columns, `rows` at a time; TableError where the file stops being readable."""
        import pyarrow as pa

        start = 1
        try:
            for batch in self._batches(names, rows):
                yield _chunk(batch, names, start)
                start += batch.num_rows
        except (pa.ArrowException, OSError) as exc:
            raise TableError(f"unreadable from row {start} on: {arrow_message(exc)}") from None


def arrow_message(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc).strip().splitlines()[0]


def _chunk(batch: pa.RecordBatch, names: Sequence[str], start: int) -> Chunk:
    """The batch's needed columns; a value Python cannot hold (a date past year 9999) makes its row bad."""
    chunk = Chunk({}, range(start, start + batch.num_rows))
    for name in names:
        column = batch.column(name)
        try:
            chunk.columns[name] = column_values(column)
        except (ValueError, OverflowError):
            chunk.columns[name] = [_value(scalar, name, i, chunk.bad) for i, scalar in enumerate(column)]
    return chunk


def _value(scalar: pa.Scalar, name: str, i: int, bad: dict[int, str]) -> Any:
    try:
        return scalar.as_py()
    except (ValueError, OverflowError) as exc:
        bad.setdefault(i, f'column "{name}" holds a {scalar.type} value Python cannot hold ({exc})')
        return None
