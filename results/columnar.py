"""A job's results as Arrow columns, written as Parquet or an Arrow IPC file in row groups while
they stream in (memory: one row group, not the job).

One row per record, in input order, the same records and values as the JSON Lines output:
`id`, `job_id`, `model`, the model's outputs as typed columns (an embedding is a fixed-size list
of float32; a classifier's `labels` a list of {label, index, score}; a generation's `text`,
`finish_reason` and its tokens, `prompt_tokens`, `completion_tokens`, `cached_prompt_tokens`, as
int64), `model_version`, `reused` (true for a result written from the results cache, as JSON
Lines' `"reused": true`), `error`
({stage, type, message} for a dead-lettered record, else null) and `attributes` (the input's
attributes as a JSON object string of the values they were, else null: jobs mix attribute keys, so
no struct fits all), then the kept input columns, each of its own type (results/kept_columns.py).
The output columns come from the job's first result; a result of another shape (a model version
with other outputs) is refused with ColumnarShapeError, as no typed column can hold both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Any, NoReturn

import numpy as np

from results.kept_columns import KeptColumns
from results.usage import generation_usage
from schemas import DeadLetter, InferenceResult
from schemas.attributes import REUSED_STAMP, attribute_values
from schemas.inference_result_bytes import ResultBody

if TYPE_CHECKING:
    import pyarrow as pa

# How a columnar format opens its file: (out, the Arrow schema) -> a pyarrow writer with
# write_batch, a context manager (parquet_file, arrow_file)
OpenTable = Callable[[IO[bytes], "pa.Schema"], Any]

# ~24 MB of 384-float embeddings: large enough for fast scans, small enough to bound memory
ROW_GROUP_ROWS = 16_384
# A generation's columns after `model`: its text, why it ended, then its tokens (generation_usage's keys)
GENERATION_STRINGS = ("text", "finish_reason")
GENERATION_TOKENS = ("prompt_tokens", "completion_tokens", "cached_prompt_tokens")


class ColumnarShapeError(ValueError):
    """A result whose outputs do not fit the columns the job's first result set."""


def _label_type() -> pa.DataType:
    import pyarrow as pa

    return pa.list_(pa.struct([("label", pa.string()), ("index", pa.int32()), ("score", pa.float32())]))


def _error_type() -> pa.DataType:
    import pyarrow as pa

    return pa.struct([("stage", pa.string()), ("type", pa.string()), ("message", pa.string())])


def _list_type(dtype: np.dtype[Any], shape: tuple[int, ...]) -> pa.DataType:
    """A tensor of this shape as nested fixed-size lists (a vector is one level)."""
    import pyarrow as pa

    typ = pa.from_numpy_dtype(dtype)
    for size in reversed(shape):
        typ = pa.list_(typ, size)
    return typ


class ResultColumns:
    """The column layout a job's results share, and the rows of one row group on their way out."""

    def __init__(self, example: InferenceResult | None, kept: KeptColumns | None = None) -> None:
        import pyarrow as pa

        self.kept = kept
        # (name, dtype, shape) of each tensor column; empty for a classifier (its labels), a
        # generation (its text and tokens) or no result
        self.tensors: list[tuple[str, np.dtype[Any], tuple[int, ...]]] = []
        self.generation = example is not None and bool(example.finish_reason)
        self.classifier = example is not None and not self.generation and bool(example.labels)
        if example is not None and not self.classifier and not self.generation:
            self.tensors = [(n, a.dtype, a.shape) for n, a in example.arrays().items()]
        fields = [("id", pa.string()), ("job_id", pa.string()), ("model", pa.string())]
        fields += [(name, _list_type(dtype, shape)) for name, dtype, shape in self.tensors]
        if self.classifier:
            fields.append(("labels", _label_type()))
        if self.generation:
            fields += [(name, pa.string()) for name in GENERATION_STRINGS]
            fields += [(name, pa.int64()) for name in GENERATION_TOKENS]
        fields += [("model_version", pa.string()), ("reused", pa.bool_())]
        fields += [("error", _error_type()), ("attributes", pa.string())]
        if kept is not None:
            fields += kept.fields(name for name, _ in fields)
        self.schema = pa.schema(fields)
        self._clear()

    def _clear(self) -> None:
        self.ids: list[str | None] = []
        self.job_ids: list[str | None] = []
        self.models: list[str | None] = []
        self.versions: list[str | None] = []
        self.reused: list[bool] = []
        self.errors: list[dict[str, str] | None] = []
        self.attributes: list[str | None] = []
        self.arrays: dict[str, list[np.ndarray | None]] = {name: [] for name, _, _ in self.tensors}
        self.labels: list[tuple[tuple[str, ...], np.ndarray, np.ndarray] | None] = []
        self.generated: dict[str, list[Any]] = (
            {name: [] for name in (*GENERATION_STRINGS, *GENERATION_TOKENS)} if self.generation else {}
        )
        self.kept_values: dict[str, list[Any]] = {name: [] for name in self.kept.names} if self.kept else {}

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, item: InferenceResult | DeadLetter) -> None:
        if isinstance(item, DeadLetter):
            self._add_row(item.record_id, item.job_id, item.model, item.model_version, None)
            self.errors[-1] = {"stage": item.stage, "type": item.error_type, "message": item.error}
            for column in (*self.arrays.values(), *self.generated.values()):
                column.append(None)
            if self.classifier:
                self.labels.append(None)
            return
        if self.generation != bool(item.finish_reason):
            self._refuse(item)
        if self.generation:
            self._add_row(item.record_id, item.job_id, item.model, item.model_version, item.attributes)
            usage = generation_usage(item)
            values = (item.text, item.finish_reason, *(usage[name] for name in GENERATION_TOKENS))
            for column, value in zip(self.generated.values(), values, strict=True):
                column.append(value)
            return
        arrays = item.arrays()
        if self.classifier != bool(item.labels) or (
            not self.classifier and [(n, a.shape) for n, a in arrays.items()] != [(n, s) for n, _, s in self.tensors]
        ):
            self._refuse(item)
        self._add_row(item.record_id, item.job_id, item.model, item.model_version, item.attributes)
        self.reused[-1] = REUSED_STAMP in item.timestamps  # written from the results cache (docs/reuse.md)
        if self.classifier:
            self.labels.append((item.labels, arrays["top_index"], arrays["top_score"]))
            return
        for name, _, _ in self.tensors:
            self.arrays[name].append(arrays[name])

    def _refuse(self, item: InferenceResult) -> NoReturn:
        raise ColumnarShapeError(
            f"record {item.record_id!r} (model {item.model} version {item.model_version}) has outputs "
            f"{self._describe(item)} where the job's first result had {self._describe_columns()}; "
            "write JSON Lines instead (--output-format jsonl)"
        )

    def fits(self, outputs: tuple[tuple[str, str, tuple[int, ...]], ...]) -> bool:
        """Whether a result of these outputs ((name, dtype, shape) each) fills the tensor columns
        exactly, in their dtypes (results/rows.py adds those by add_body)."""
        return (
            not self.classifier
            and not self.generation
            and len(outputs) == len(self.tensors)
            and all(
                name == column and shape == column_shape and np.dtype(dtype) == column_dtype
                for (name, dtype, shape), (column, column_dtype, column_shape) in zip(
                    outputs, self.tensors, strict=True
                )
            )
        )

    def add_body(self, body: ResultBody, arrays: list[np.ndarray]) -> None:
        """A result read from its bytes, whose outputs `fits` said fit, with its arrays in order (never
        a reused one: results/rows.py decodes those whole)."""
        head = body.head
        self._add_row(head.record_id, head.job_id, head.model, head.model_version, body.attributes)
        for (name, _, _), array in zip(self.tensors, arrays, strict=True):
            self.arrays[name].append(array)

    def _add_row(
        self, record_id: str | None, job_id: str | None, model: str | None, version: str | None, attributes: Any
    ) -> None:
        self.ids.append(record_id)
        self.job_ids.append(job_id)
        self.models.append(model)
        self.versions.append(version)
        self.reused.append(False)
        self.errors.append(None)
        attributes = attributes or {}
        if self.kept is not None:
            kept, attributes = self.kept.split(attributes)
            for name, value in kept.items():
                self.kept_values[name].append(value)
        values = attribute_values(attributes) if attributes else None
        self.attributes.append(json.dumps(values, ensure_ascii=False, sort_keys=True) if values else None)

    @staticmethod
    def _describe(item: InferenceResult) -> str:
        if item.finish_reason:
            return "a generation's text"
        return "labels" if item.labels else ", ".join(f"{n}{list(a.shape)}" for n, a in item.arrays().items())

    def _describe_columns(self) -> str:
        if self.generation:
            return "a generation's text"
        return "labels" if self.classifier else ", ".join(f"{n}{list(s)}" for n, _, s in self.tensors) or "none"

    def take(self) -> pa.RecordBatch:
        """The rows added since the last take, as one record batch."""
        import pyarrow as pa

        columns: list[pa.Array] = [pa.array(self.ids, pa.string()), pa.array(self.job_ids, pa.string())]
        columns.append(pa.array(self.models, pa.string()))
        for name, dtype, shape in self.tensors:
            columns.append(_tensor_column(self.arrays[name], dtype, shape))
        if self.classifier:
            columns.append(_label_column(self.labels))
        for name, values in self.generated.items():
            columns.append(pa.array(values, pa.int64() if name in GENERATION_TOKENS else pa.string()))
        columns.append(pa.array(self.versions, pa.string()))
        columns.append(pa.array(self.reused, pa.bool_()))
        columns.append(pa.array(self.errors, _error_type()))
        columns.append(pa.array(self.attributes, pa.string()))
        if self.kept is not None:
            columns += self.kept.arrays(self.kept_values)
        self._clear()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def _tensor_column(rows: list[np.ndarray | None], dtype: np.dtype[Any], shape: tuple[int, ...]) -> pa.Array:
    """Rows of one tensor output as nested fixed-size lists over one flat buffer (no per-value Python)."""
    import pyarrow as pa

    missing = np.array([row is None for row in rows])
    zeros = np.zeros(shape, dtype)
    flat = np.stack([zeros if row is None else row for row in rows]).astype(dtype, copy=False).reshape(-1)
    mask = pa.array(missing) if missing.any() else None
    if not shape:  # a scalar output: a plain column
        return pa.array(flat, mask=missing if mask is not None else None)
    column: pa.Array = pa.array(flat)
    for size in reversed(shape[1:]):
        column = pa.FixedSizeListArray.from_arrays(column, size)
    return pa.FixedSizeListArray.from_arrays(column, shape[0], mask=mask)


def _label_column(rows: list[tuple[tuple[str, ...], np.ndarray, np.ndarray] | None]) -> pa.Array:
    import pyarrow as pa

    lengths = np.array([0 if row is None else len(row[0]) for row in rows], dtype=np.int32)
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    present = [row for row in rows if row is not None]
    labels = [label for row in present for label in row[0]]
    index = np.concatenate([row[1] for row in present]).astype(np.int32) if present else np.array([], np.int32)
    score = np.concatenate([row[2] for row in present]).astype(np.float32) if present else np.array([], np.float32)
    values = pa.StructArray.from_arrays(
        [pa.array(labels, pa.string()), pa.array(index), pa.array(score)], names=["label", "index", "score"]
    )
    missing = np.array([row is None for row in rows])
    return pa.ListArray.from_arrays(
        pa.array(offsets), values, type=_label_type(), mask=pa.array(missing) if missing.any() else None
    )


class RowGroups:
    """columns written to out as Parquet (zstd) or an Arrow IPC file, a row group each time
    ROW_GROUP_ROWS rows are in: a context manager; call added() after each row given to columns.
    Its exit writes what is left (an empty job still gets its file, with the columns and no row)
    and closes the file, also on an error (pyarrow's writer would write to a closed file later)."""

    def __init__(self, columns: ResultColumns, out: IO[bytes], table: OpenTable) -> None:
        self.columns = columns
        self.written = 0
        self._writer = table(out, columns.schema)

    def __enter__(self) -> RowGroups:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        with self._writer:
            if kind is None and (len(self.columns) or not self.written):
                self._flush()

    def added(self) -> None:
        if len(self.columns) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        self.written += len(self.columns)
        self._writer.write_batch(self.columns.take())


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The Parquet column paths worth dictionary encoding: every leaf that is not floating point.
    pyarrow tries a dictionary on every column by default; on an embedding's floats it builds one
    of every value and falls back page by page: 30,000 MiniLM results took 18 us a row to write
    and 61 MB, against 4.5 us and 43 MB with the floats left plain (both zstd)."""
    import pyarrow as pa

    def leaves(path: str, typ: pa.DataType) -> Iterable[tuple[str, pa.DataType]]:
        if pa.types.is_struct(typ):
            for i in range(typ.num_fields):
                yield from leaves(f"{path}.{typ.field(i).name}", typ.field(i).type)
        elif pa.types.is_list(typ) or pa.types.is_fixed_size_list(typ) or pa.types.is_large_list(typ):
            yield from leaves(f"{path}.list.element", typ.value_type)
        else:
            yield path, typ

    return [
        path
        for field in schema
        for path, typ in leaves(field.name, field.type)
        if not pa.types.is_floating(typ) and not pa.types.is_decimal(typ)
    ]


def parquet_file(out: IO[bytes], schema: pa.Schema) -> Any:
    """A Parquet (zstd) writer of schema to out: a context manager with write_batch."""
    import pyarrow.parquet as pq

    return pq.ParquetWriter(out, schema, compression="zstd", use_dictionary=dictionary_columns(schema))


def arrow_file(out: IO[bytes], schema: pa.Schema) -> Any:
    """An Arrow IPC file (Feather v2) writer of schema to out: a context manager with write_batch."""
    import pyarrow as pa

    return pa.ipc.new_file(out, schema)
