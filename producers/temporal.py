"""A table column's values as Python objects, nanosecond times included.

pyarrow's to_pylist turns a nanosecond timestamp, time or duration into a pandas object when
pandas is installed, and raises ("Install pandas") when it is not and a value has sub-microsecond
digits. Their exact text is made here instead, from the integer nanoseconds: a timestamp as ISO
8601 with 9 digits (and its offset, as a microsecond timestamp has), a time of day likewise, a
duration as its exact seconds in a string (results/kept_columns.py turns each back into its Arrow type).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

NS = 1_000_000_000


def column_values(array: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The array's values; nanosecond temporal values as exact text (module docstring)."""
    import pyarrow as pa

    typ = array.type
    t = pa.types
    if not ((t.is_timestamp(typ) or t.is_time64(typ) or t.is_duration(typ)) and typ.unit == "ns"):
        return list(array.to_pylist())
    nanos: list[int | None] = array.cast(pa.int64()).to_pylist()
    if t.is_duration(typ):
        return [None if n is None else _seconds(n) for n in nanos]
    if t.is_time64(typ):
        return [None if n is None else _time_of_day(n) for n in nanos]
    # the microseconds as a datetime (its offset too, in the column's time zone), then the last 3 digits
    micros = pa.array([None if n is None else n // 1000 for n in nanos], pa.int64()).cast(pa.timestamp("us", typ.tz))
    out: list[str | None] = []
    for n, moment in zip(nanos, micros.to_pylist(), strict=True):
        if n is None:
            out.append(None)
            continue
        iso = moment.isoformat(timespec="microseconds")  # YYYY-MM-DDTHH:MM:SS.ffffff[+HH:MM]
        out.append(f"{iso[:26]}{n % 1000:03d}{iso[26:]}")
    return out


def _seconds(nanos: int) -> str:
    sign = "-" if nanos < 0 else ""
    whole, part = divmod(abs(nanos), NS)
    return f"{sign}{whole}.{part:09d}"


def _time_of_day(nanos: int) -> str:
    seconds, part = divmod(nanos, NS)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{hour:02d}:{minute:02d}:{second:02d}.{part:09d}"


def nanoseconds(seconds: str) -> int:
    """Exact seconds as text ("-1.000000500") back to integer nanoseconds."""
    sign = -1 if seconds.startswith("-") else 1
    whole, _, part = seconds.lstrip("+-").partition(".")
    return sign * (int(whole or "0") * NS + int((part + "000000000")[:9]))


def time_nanoseconds(text: str) -> int:
    """A time of day as ISO text ("13:05:09.123456789") back to nanoseconds since midnight."""
    clock, _, part = text.partition(".")
    hour, minute, second = (int(x) for x in clock.split(":"))
    return ((hour * 60 + minute) * 60 + second) * NS + int((part + "000000000")[:9])
