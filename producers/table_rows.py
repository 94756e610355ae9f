"""Table inputs as records: one row is one text or image, its id from --id-column (else its row
number across the whole input), and the --keep-columns values carried as attributes.

A file whose columns cannot make records (one missing, text that is not strings, a binary column
kept) is one problem of the file; a row that cannot is a problem of that row, as a JSON line is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from producers.formats import open_table
from producers.images import MAX_IMAGE_BYTES, ImageRecord, checked_image
from producers.inputs import MAX_ATTRIBUTES_BYTES, InputError, InputRecord, check_text, lone_surrogate
from producers.table_reader import BATCH_ROWS, IMAGE_BATCH_ROWS, Chunk, TableError
from schemas.generation_request import RequestDefaults

if TYPE_CHECKING:
    import pyarrow as pa

# Names every result already has (results/outcome.py, results/columnar.py): a kept column of one of
# these names would shadow it.
RESERVED_NAMES = frozenset({"id", "job_id", "model", "model_version", "reused", "error", "attributes", "labels"})


@dataclass(frozen=True)
class Columns:
    """Which columns of a table input (or keys of JSON Lines) make its records, and the defaults
    its generation requests take."""

    text: str = "text"
    image: str = "image"
    id: str | None = None  # None: the row number across the whole input
    keep: tuple[str, ...] = ()
    text_field: str = "text"  # JSON Lines: the key of the text
    id_field: str = "id"  # JSON Lines: the key of the id
    # A causal LM's requests: the job's defaults, which make every record a request when given
    requests: RequestDefaults = field(default_factory=RequestDefaults)

    def to_json(self) -> str | None:
        """These columns as a JSON object (a schedule stores them so), None for the defaults."""
        if self == DEFAULT_COLUMNS:
            return None
        return json.dumps({**asdict(self), "keep": list(self.keep)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Columns:
        if not text:
            return DEFAULT_COLUMNS
        fields = json.loads(text)
        requests = RequestDefaults(**fields.get("requests", {}))
        return cls(**{**fields, "keep": tuple(fields.get("keep", ())), "requests": requests})


DEFAULT_COLUMNS = Columns()


def read_tables(
    files: Sequence[Path],
    columns: Columns,
    kind: Literal["text", "image"] = "text",
    max_image_bytes: int = MAX_IMAGE_BYTES,
    fmt: str | None = None,
) -> Iterator[InputRecord | ImageRecord | InputError]:
    """Every row of every file, in order, as a record or a problem pinned to file and row (line,
    for CSV). Each file's format is fmt, else what its suffix says."""
    value_column = columns.image if kind == "image" else columns.text
    names = list(dict.fromkeys([value_column, *([columns.id] if columns.id else []), *columns.keep]))
    seen: dict[str, str] = {}  # id -> where it first was
    kept_types: dict[str, pa.DataType] = {}
    number = 0
    for path in files:
        try:
            table = open_table(path, fmt)
            problem = column_problem(table.schema, columns, kind, kept_types)
        except TableError as exc:
            problem = str(exc)
        if problem:
            yield InputError(str(path), 0, problem)
            continue
        kept_types = kept_types or {n: table.schema.field(n).type for n in columns.keep}
        keepers = [(n, _transit(table.schema.field(n).type)) for n in columns.keep]
        rows = IMAGE_BATCH_ROWS if kind == "image" else BATCH_ROWS
        try:
            for chunk in table.chunks(names, rows):
                for i, row in enumerate(chunk.numbers):
                    number += 1
                    where = _Where(str(path), row, table.unit)
                    item = _record(chunk, i, where, number, columns, kind, keepers, max_image_bytes)
                    if isinstance(item, InputError):
                        yield item
                        continue
                    first = seen.get(item.record_id) if columns.id else None
                    if first is not None:
                        yield where.error(f"duplicate id {item.record_id!r} (first {first})")
                        continue
                    if columns.id:
                        seen[item.record_id] = where.first(path, files)
                    yield item
        except TableError as exc:
            yield InputError(str(path), 0, str(exc))


@dataclass(frozen=True)
class _Where:
    path: str
    row: int
    unit: str

    def error(self, reason: str) -> InputError:
        return InputError(self.path, self.row, reason, self.unit)

    def first(self, path: Path, files: Sequence[Path]) -> str:
        return f"on {self.unit} {self.row}" + (f" of {path.name}" if len(files) > 1 else "")


def column_problem(schema: pa.Schema, columns: Columns, kind: str, kept_types: dict[str, pa.DataType]) -> str | None:
    """Why a table with this schema cannot make records, or None when it can."""
    import pyarrow as pa

    value_column = columns.image if kind == "image" else columns.text
    option = "--image-column" if kind == "image" else "--text-column"
    for name, flag in (
        (value_column, option),
        (columns.id, "--id-column"),
        *((n, "--keep-columns") for n in columns.keep),
    ):
        if name is not None and name not in schema.names:
            shown = ", ".join(schema.names[:30]) + (
                f" and {len(schema.names) - 30} more" if len(schema.names) > 30 else ""
            )
            return f'no column "{name}" ({flag}); its columns are: {shown or "none"}'
        if name is not None and len(found := schema.get_all_field_indices(name)) > 1:
            places = ", ".join(str(i + 1) for i in found[:-1]) + f" and {found[-1] + 1}"
            return f'columns {places} are all named "{name}" ({flag}): give each column its own name'
    typ = schema.field(value_column).type
    if kind == "text" and not _is_text(typ):
        return f'column "{value_column}" holds {typ}, not text ({option} names the column of texts)'
    if kind == "image" and not (_is_text(typ) or _is_binary(typ) or _is_hf_image(typ)):
        return f'column "{value_column}" holds {typ}: an image column holds paths (text) or image bytes (binary)'
    if columns.id is not None:
        typ = schema.field(columns.id).type
        if not (_is_text(typ) or pa.types.is_integer(typ)):
            return f'column "{columns.id}" holds {typ}: ids are text or integers (--id-column)'
    for name in columns.keep:
        typ = schema.field(name).type
        if _is_binary(typ):
            return f'column "{name}" holds {typ}: a binary column is not kept (--keep-columns), JSON cannot hold it'
        if name in kept_types and kept_types[name] != typ:
            return (
                f'column "{name}" holds {typ} here and {kept_types[name]} in the first file: kept columns keep one type'
            )
    return None


def _is_text(typ: pa.DataType) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(typ):  # pandas' categorical strings
        typ = typ.value_type
    return bool(pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ))


def _is_binary(typ: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_fixed_size_binary(typ)
        or pa.types.is_binary_view(typ)
    )  # fmt: skip


def _is_hf_image(typ: pa.DataType) -> bool:
    """A Hugging Face datasets Image column: struct<bytes: binary, path: string>."""
    import pyarrow as pa

    return bool(pa.types.is_struct(typ) and typ.get_field_index("bytes") >= 0)


def _record(
    chunk: Chunk,
    i: int,
    where: _Where,
    number: int,
    columns: Columns,
    kind: str,
    keepers: list[tuple[str, Callable[[Any], Any]]],
    max_image_bytes: int,
) -> InputRecord | ImageRecord | InputError:
    if i in chunk.bad:
        return where.error(chunk.bad[i])
    try:
        record_id = _id(chunk.columns[columns.id][i], columns.id) if columns.id else str(number)
        attributes = _kept(chunk, i, keepers)
    except ValueError as exc:
        return where.error(str(exc))
    if kind == "image":
        return _image(chunk.columns[columns.image][i], columns.image, where, record_id, attributes, max_image_bytes)
    text = chunk.columns[columns.text][i]
    if text is None:
        return where.error(f'"{columns.text}" is null')
    problem = check_text(text)
    return where.error(problem) if problem else InputRecord(record_id, text, where.row, attributes)


def _id(value: Any, column: str) -> str:
    if value is None or value == "":
        return _raise(f'"{column}" (the id) is {"null" if value is None else "empty"}')
    text = str(value)
    surrogate = lone_surrogate(text)
    if surrogate:
        _raise(f'"{column}" (the id) holds a lone surrogate ({surrogate}), which is not valid Unicode')
    return text


def _raise(message: str) -> Any:
    raise ValueError(message)


def _image(
    value: Any, column: str, where: _Where, record_id: str, attributes: dict[str, str], max_bytes: int
) -> ImageRecord | InputError:
    if isinstance(value, dict):  # a Hugging Face Image: its bytes, else its path
        value = value.get("bytes") or value.get("path")
    if value is None or value == "" or value == b"":
        return where.error(f'"{column}" is {"null" if value is None else "empty"}')
    if isinstance(value, bytes):
        if len(value) > max_bytes:
            return where.error(f"image is {len(value)} bytes, over the record limit of {max_bytes}")
        return ImageRecord(record_id, Path(f"{where.path}:{where.unit} {where.row}"), where.row, attributes, value)
    folder = Path(where.path).parent
    record = ImageRecord(record_id, folder / value, where.row, attributes)
    checked = checked_image(record, where.path, where.row, max_bytes)
    return where.error(checked.reason) if isinstance(checked, InputError) else checked


def _kept(chunk: Chunk, i: int, keepers: list[tuple[str, Callable[[Any], Any]]]) -> dict[str, str]:
    """The kept columns' values of row i as JSON texts (schemas/attributes.py), within the attribute limit."""
    if not keepers:
        return {}
    kept, size = {}, 0
    for name, transit in keepers:
        try:
            text = json.dumps(
                transit(chunk.columns[name][i]), ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                default=_json_default,
            )  # fmt: skip
        except (ValueError, TypeError) as exc:
            raise ValueError(f'column "{name}" holds a value JSON cannot carry ({exc})') from None
        kept[name] = text
        size += len(name.encode("utf-8", "surrogatepass")) + len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ATTRIBUTES_BYTES:
        raise ValueError(f"the kept columns hold {size:,} bytes, over the limit of {MAX_ATTRIBUTES_BYTES:,}")
    return kept


def _transit(typ: pa.DataType) -> Callable[[Any], Any]:
    """How a value of this type goes into JSON: floats that JSON has no number for as the strings
    "NaN", "Infinity", "-Infinity" (the output turns them back into floats), the rest as is."""
    import pyarrow as pa

    if pa.types.is_floating(typ):
        return _float
    return _same


def _same(value: Any) -> Any:
    return value


def _float(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _json_default(value: Any) -> Any:
    """Times as ISO 8601 text, decimals as their exact digits, durations as seconds."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    raise TypeError(f"{type(value).__name__} values are not kept")


def table_kind(files: Sequence[Path], columns: Columns, fmt: str | None = None) -> Literal["text", "image"]:
    """image when the first file has the image column and not the text column; else text (whose
    reader names what is missing)."""
    try:
        names = open_table(files[0], fmt).schema.names
    except TableError:
        return "text"
    return "image" if columns.image in names and columns.text not in names else "text"


def kept_schema(files: Sequence[Path], columns: Columns, fmt: str | None = None) -> pa.Schema | None:
    """The kept columns' names and Arrow types, from the first file that has them all (the reader
    refuses a file whose types differ), else None."""
    import pyarrow as pa

    if not columns.keep:
        return None
    for path in files:
        try:
            schema = open_table(path, fmt).schema
        except TableError:
            continue
        if all(schema.get_field_index(name) >= 0 for name in columns.keep):  # -1: absent, or named twice
            return pa.schema([schema.field(name) for name in columns.keep])
    return None
