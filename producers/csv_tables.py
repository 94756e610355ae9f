"""CSV and TSV files as tables, read with Python's csv module, not pyarrow's: only it says on which
line a row starts (a quoted value may hold newlines), which every message about a CSV row names,
and a ragged row is a message about that line rather than the end of the file. CSV has no types:
every column is text.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO

from producers.inputs import MAX_TEXT_BYTES
from producers.table_reader import Chunk, Table, TableError

if TYPE_CHECKING:
    import pyarrow as pa

# csv's default field limit (131,072 characters) is below the text limit; a field past this one
# cannot be a valid text (a character is at least a byte), so it is refused, never held.
csv.field_size_limit(max(csv.field_size_limit(), MAX_TEXT_BYTES + 1))


class CsvTable(Table):
    title = "CSV"
    unit = "line"
    delimiter = ","

    def _schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema([(name, pa.string()) for name in self._csv_header()])

    def _csv_header(self) -> list[str]:
        with self.path.open("rb") as f:
            try:
                header = next(csv.reader(_utf8_lines(f), delimiter=self.delimiter), None)
            except (csv.Error, NotUtf8Error) as exc:
                raise TableError(f"cannot read the header row: {exc}") from None
        if not header:
            raise TableError("no header row: a CSV input's first line names its columns")
        return header

    def chunks(self, names: Sequence[str], rows: int) -> Iterator[Chunk]:
        header = self.schema.names
        wanted = [header.index(n) for n in names]
        with self.path.open("rb") as f:
            reader = csv.reader(_utf8_lines(f), delimiter=self.delimiter)
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


class TsvTable(CsvTable):
    title = "TSV"
    delimiter = "\t"


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


def _empty(names: Sequence[str]) -> Chunk:
    return Chunk({n: [] for n in names}, [])
