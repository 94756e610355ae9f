"""Arrow IPC files (Feather v2) and streams as tables, memory-mapped."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from producers.table_reader import Table

if TYPE_CHECKING:
    import pyarrow as pa


class ArrowTable(Table):
    title = "Arrow IPC"

    def _schema(self) -> pa.Schema:
        import pyarrow as pa

        with pa.memory_map(str(self.path)) as source:
            return _open_ipc(source).schema

    def _batches(self, names: Sequence[str], rows: int) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        with pa.memory_map(str(self.path)) as source:
            reader = _open_ipc(source)
            for batch in _ipc_batches(reader):
                for offset in range(0, batch.num_rows, rows):
                    yield batch.slice(offset, rows)


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
