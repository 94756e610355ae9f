"""The per-item writers that results/rows.py (what `results` and `run` write with, from the
records' bytes) is checked against: each result or dead letter decoded whole, then written on its
own, by the same line and column code (results.outcome.json_line, results.columnar.ResultColumns.add)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from results.columnar import ResultColumns, RowGroups, arrow_file, parquet_file
from results.formats import OUTPUTS, OutputFormat
from results.job_output import JobOutput
from results.kept_columns import KeptColumns
from results.outcome import json_line
from results.output import write_lines, write_table
from results.spill import ResultSpill
from schemas import DeadLetter, InferenceResult

TABLES = {OutputFormat.PARQUET: parquet_file, OutputFormat.ARROW: arrow_file}


def write_spill(spill: ResultSpill, path: Path | None, fmt: OutputFormat = OutputFormat.JSONL) -> int:
    """The spill's records to path (JSON Lines: or, given None, nowhere) as fmt's writer writes a
    job's output (results/formats.py); the records written."""
    return OUTPUTS[fmt].write(JobOutput(spill, list), path, io.StringIO())


def write_jsonl(
    items: Iterable[InferenceResult | DeadLetter], write: Callable[[bytes], object], kept: KeptColumns | None = None
) -> int:
    """The items as JSON Lines through write(bytes), a line a call. Returns the lines written."""
    n = 0
    for item in items:
        write(json_line(item, kept))
        n += 1
    return n


def write_columnar(
    items: Iterable[InferenceResult | DeadLetter],
    example: InferenceResult | None,
    out: IO[bytes],
    fmt: OutputFormat,
    kept: KeptColumns | None = None,
) -> int:
    """Every item to out as Parquet or an Arrow IPC file, in row groups (results.columnar.RowGroups);
    example (any result of the job, None if it has none) sets the columns, and kept adds the
    input's kept columns. Returns the rows written."""
    with RowGroups(ResultColumns(example, kept), out, TABLES[fmt]) as groups:
        for item in items:
            groups.columns.add(item)
            groups.added()
    return groups.written


def write_items(
    items: Iterable[InferenceResult | DeadLetter],
    example: InferenceResult | None,
    path: Path | None,
    out: IO[str],
    fmt: OutputFormat = OutputFormat.JSONL,
    kept: KeptColumns | None = None,
) -> int:
    """Every item, in the order given, to path or, as JSON Lines only, to out, as
    results.rows.write_rows writes rows. Returns the records written."""
    if fmt is OutputFormat.JSONL:
        return write_lines(path, out, lambda write: write_jsonl(items, write, kept))
    return write_table(path, lambda f: write_columnar(items, example, f, fmt, kept))
