"""Kept input columns in a job's outputs (--keep-columns of a table input).

Their values travel in the records' attributes as JSON text (schemas/attributes.py); their names
and Arrow types travel once, in the job's registry row (Job.columns, an Arrow IPC schema). JSON
Lines output shows each as a JSON value of its own key; Parquet and Arrow output as its own column
of the type it had in the input (int64 stays int64, a timestamp a timestamp), turned back from JSON.
A type JSON text cannot bring back exactly (a list of timestamps, say) comes back as its JSON text.
A kept column named like one of the model's outputs comes back as "input.<name>"; submit refuses
keeping both "x" and "input.x" (jobs/input_problems.py), which would then share a name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import time, timedelta
from typing import TYPE_CHECKING, Any

from producers.temporal import NS, nanoseconds, time_nanoseconds

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class KeptColumns:
    schema: pa.Schema

    @classmethod
    def of(cls, serialized: bytes | None) -> KeptColumns | None:
        """The kept columns a registry row names, or None when it keeps none."""
        if not serialized:
            return None
        import pyarrow as pa

        return cls(pa.ipc.read_schema(pa.py_buffer(serialized)))

    @property
    def names(self) -> list[str]:
        return list(self.schema.names)

    def split(self, attributes: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
        """(the kept columns' JSON values, None where absent; the attributes that are not kept)."""
        values = {name: _json(attributes.get(name)) for name in self.schema.names}
        return values, {k: v for k, v in attributes.items() if k not in values}

    def output_names(self, taken: Iterable[str]) -> list[str]:
        """Each kept column's name in an output whose own fields are `taken`: "input.<name>" where
        the name is taken, prefixed again while that is taken too, so no two columns share a name
        (submit refuses keeping both "x" and "input.x"; a job registered before it did still reads)."""
        used, names = set(taken), []
        for name in self.schema.names:
            while name in used:
                name = f"input.{name}"
            used.add(name)
            names.append(name)
        return names

    def fields(self, taken: Iterable[str]) -> list[pa.Field]:
        import pyarrow as pa

        names = self.output_names(taken)
        return [pa.field(n, _output_type(f.type)) for n, f in zip(names, self.schema, strict=True)]

    def arrays(self, rows: dict[str, list[Any]]) -> list[pa.Array]:
        """Each kept column's JSON values (in schema order) as an Arrow array of its output type."""
        return [typed_array(rows[f.name], f.type) for f in self.schema]


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _output_type(typ: pa.DataType) -> pa.DataType:
    import pyarrow as pa

    return typ if _exact(typ, top=True) else pa.string()


def _exact(typ: pa.DataType, top: bool = False) -> bool:
    """Whether JSON values turn back into this type exactly: scalars JSON has (and, at the top
    level, times and decimals, which travel as text), and lists and structs of JSON's scalars."""
    import pyarrow as pa

    t = pa.types
    if t.is_integer(typ) or t.is_floating(typ) or t.is_boolean(typ) or t.is_null(typ):
        return True
    if t.is_string(typ) or t.is_large_string(typ) or t.is_dictionary(typ):
        return True
    if top and (t.is_timestamp(typ) or t.is_date(typ) or t.is_time(typ) or t.is_decimal(typ) or t.is_duration(typ)):
        return True
    if t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ):
        return _exact(typ.value_type)
    if t.is_struct(typ):
        return all(_exact(typ.field(i).type) for i in range(typ.num_fields))
    return False


def typed_array(values: list[Any], typ: pa.DataType) -> pa.Array:
    """JSON values of a kept column back as an array of the column's output type."""
    import pyarrow as pa

    t = pa.types
    if not _exact(typ, top=True):
        return pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in values], pa.string())
    if t.is_floating(typ):  # "NaN", "Infinity", "-Infinity" travel as strings (producers/table_rows.py)
        values = [float(v) if isinstance(v, str) else v for v in values]
    elif t.is_timestamp(typ) or t.is_date(typ) or t.is_decimal(typ):
        return pa.array(values, pa.string()).cast(typ)
    elif (t.is_time64(typ) or t.is_duration(typ)) and typ.unit == "ns":
        return pa.array([None if v is None else _nanoseconds(v, typ) for v in values], pa.int64()).cast(typ)
    elif t.is_time(typ):
        values = [None if v is None else time.fromisoformat(v) for v in values]
    elif t.is_duration(typ):
        values = [None if v is None else timedelta(seconds=v) for v in values]
    return pa.array(values, typ)


def _nanoseconds(value: str | float, typ: pa.DataType) -> int:
    """A nanosecond time or duration's JSON value (producers/temporal.py) as its integer; a
    duration kept before it travelled as exact text is a number of seconds."""
    import pyarrow as pa

    if pa.types.is_time(typ):
        return time_nanoseconds(str(value))
    return nanoseconds(value) if isinstance(value, str) else round(value * NS)
