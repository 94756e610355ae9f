"""Table files (Parquet, Arrow IPC/Feather, CSV/TSV) read a batch of rows at a time: what a
Parquet footer, an Arrow schema or a CSV header says the columns are, and the needed columns'
values, batch by batch. Memory is one batch (one Parquet row group at most), whatever the file's size.

CSV is read with Python's csv module, not pyarrow's: only it says on which line a row starts (a
quoted value may hold newlines), which every message about a CSV row names, and a ragged row is a
message about that line rather than the end of the file. CSV has no types: every column is text.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

from producers.inputs import MAX_TEXT_BYTES
from producers.temporal import column_values

if TYPE_CHECKING:
    import pyarrow as pa

TableFormat = Literal["parquet", "arrow", "csv", "tsv"]
TABLE_SUFFIXES: dict[str, TableFormat] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
    ".csv": "csv",
    ".tsv": "tsv",
}
BATCH_ROWS = 8192  # rows per batch of a text table: to_pylist per batch, never per file
IMAGE_BATCH_ROWS = 64  # an image table's rows can be megabytes each

# csv's default field limit (131,072 characters) is below the text limit; a field past this one
# cannot be a valid text (a character is at least a byte), so it is refused, never held.
csv.field_size_limit(max(csv.field_size_limit(), MAX_TEXT_BYTES + 1))


class TableError(ValueError):
    """The file cannot be read as a table of its format; the message says why (no path in it)."""


def table_format(path: Path) -> TableFormat | None:
    return TABLE_SUFFIXES.get(path.suffix.lower())


def table_files(folder: Path) -> list[Path]:
    """The table files under folder, recursively, in path order. Hidden files and those starting
    with "_" are not data (Spark's _SUCCESS and _metadata, a .crc file), as Spark and pyarrow skip them."""
    found = []
    for path in folder.rglob("*"):
        parts = path.relative_to(folder).parts
        if any(p.startswith((".", "_")) for p in parts) or table_format(path) is None:
            continue
        if path.is_file():
            found.append(path)
    return sorted(found)


@dataclass(frozen=True)
class Chunk:
    """Some rows of a table: the needed columns' values, the number of each row for messages, and
    rows that could not be read (index -> why: a ragged CSV line)."""

    columns: dict[str, list[Any]]
    numbers: Sequence[int]
    bad: dict[int, str] = field(default_factory=dict)


class Table:
    """One open table file: its schema at once, its rows as chunks on demand."""

    def __init__(self, path: Path, fmt: TableFormat) -> None:
        self.path, self.fmt = path, fmt
        self.unit = "line" if fmt in ("csv", "tsv") else "row"
        self.schema = self._schema()

    def _schema(self) -> pa.Schema:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            if self.fmt == "parquet":
                with pq.ParquetFile(self.path) as f:
                    return f.schema_arrow
            if self.fmt == "arrow":
                with pa.memory_map(str(self.path)) as source:
                    return _open_ipc(source).schema
            return pa.schema([(name, pa.string()) for name in self._csv_header()])
        except (pa.ArrowException, OSError) as exc:
            raise TableError(f"not a readable {_NAMES[self.fmt]} file: {_arrow_message(exc)}") from None

    def _csv_header(self) -> list[str]:
        with self.path.open("rb") as f:
            try:
                header = next(csv.reader(_utf8_lines(f), delimiter=self._delimiter), None)
            except (csv.Error, NotUtf8Error) as exc:
                raise TableError(f"cannot read the header row: {exc}") from None
        if not header:
            raise TableError("no header row: a CSV input's first line names its columns")
        return header

    @property
    def _delimiter(self) -> str:
        return "\t" if self.fmt == "tsv" else ","

    def chunks(self, names: Sequence[str], rows: int) -> Iterator[Chunk]:
        """The named columns, `rows` at a time; TableError where the file stops being readable."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.fmt in ("csv", "tsv"):
            yield from self._csv_chunks(names, rows)
            return
        start = 1
        try:
            if self.fmt == "parquet":
                with pq.ParquetFile(self.path) as f:
                    for batch in f.iter_batches(batch_size=rows, columns=list(names)):
                        yield _chunk(batch, names, start)
                        start += batch.num_rows
                return
            with pa.memory_map(str(self.path)) as source:
                reader = _open_ipc(source)
                for batch in _ipc_batches(reader):
                    for offset in range(0, batch.num_rows, rows):
                        part = batch.slice(offset, rows)
                        yield _chunk(part, names, start)
                        start += part.num_rows
        except (pa.ArrowException, OSError) as exc:
            raise TableError(f"unreadable from row {start} on: {_arrow_message(exc)}") from None

    def _csv_chunks(self, names: Sequence[str], rows: int) -> Iterator[Chunk]:
        header = self.schema.names
        wanted = [header.index(n) for n in names]
        with self.path.open("rb") as f:
            reader = csv.reader(_utf8_lines(f), delimiter=self._delimiter)
            chunk = _empty(names)
            line = 1
            try:
                next(reader)
                line = reader.line_num + 1
                for row in reader:
                    first, line = line, reader.line_num + 1
                    if not row:  # a blank line
                        continue
                    if len(row) != len(header):
                        chunk.bad[len(chunk.numbers)] = f"{len(row)} fields where the header has {len(header)}"
                        row = [""] * len(header)
                    for name, index in zip(names, wanted, strict=True):
                        chunk.columns[name].append(row[index])
                    assert isinstance(chunk.numbers, list)
                    chunk.numbers.append(first)
                    if len(chunk.numbers) >= rows:
                        yield chunk
                        chunk = _empty(names)
            except NotUtf8Error as exc:
                if chunk.numbers:
                    yield chunk
                raise TableError(f"unreadable from line {exc.line} on: {exc}") from None
            except csv.Error as exc:
                if chunk.numbers:
                    yield chunk
                raise TableError(f"unreadable from line {line} on: {exc}") from None
            if chunk.numbers:
                yield chunk


class NotUtf8Error(ValueError):
    """A CSV line that is not UTF-8, named by its line in the file."""

    def __init__(self, line: int, exc: UnicodeDecodeError) -> None:
        bad = exc.object[exc.start : exc.end]
        super().__init__(f"byte 0x{bad[0]:02x} at byte {exc.start + 1} of line {line} is not UTF-8 ({exc.reason})")
        self.line = line


def _utf8_lines(f: BinaryIO) -> Iterator[str]:
    """The file's lines decoded one at a time, as a text file opened with newline="" splits them
    (at \n, \r\n and a lone \r), so csv's line_num counts the same lines. A whole text file
    decodes a block ahead of the rows read: a bad byte on line 200,002 of a file was reported at
    line 199,852, the last row read when the block failed, and a bad byte on line 3 as a header
    that could not be read. Line by line, the line named is the bad byte's own."""
    number = 0
    for raw in f:
        for piece in raw.splitlines(keepends=True) if b"\r" in raw else (raw,):
            number += 1
            try:
                text = piece.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise NotUtf8Error(number, exc) from None
            yield text.removeprefix("\ufeff") if number == 1 else text  # a byte-order mark is no header


_NAMES = {"parquet": "Parquet", "arrow": "Arrow IPC", "csv": "CSV", "tsv": "TSV"}


def _arrow_message(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc).strip().splitlines()[0]


def _open_ipc(source: Any) -> Any:
    """An Arrow IPC file (Feather v2) reader, else a stream reader for the same bytes."""
    import pyarrow as pa

    try:
        return pa.ipc.open_file(source)
    except pa.ArrowInvalid:
        source.seek(0)
        return pa.ipc.open_stream(source)


def _ipc_batches(reader: Any) -> Iterator[pa.RecordBatch]:
    if hasattr(reader, "num_record_batches"):
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
    else:
        yield from reader


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


def _empty(names: Sequence[str]) -> Chunk:
    return Chunk({n: [] for n in names}, [])
