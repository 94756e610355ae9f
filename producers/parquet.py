"""Parquet files as tables: the schema from the footer, the rows a row group's batch at a time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from producers.table_reader import Table

if TYPE_CHECKING:
    import pyarrow as pa


class ParquetTable(Table):
    title = "Parquet"

    def _schema(self) -> pa.Schema:
        import pyarrow.parquet as pq

        with pq.ParquetFile(self.path) as f:
            return f.schema_arrow

    def _batches(self, names: Sequence[str], rows: int) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        with pq.ParquetFile(self.path) as f:
            yield from f.iter_batches(batch_size=rows, columns=list(names))
