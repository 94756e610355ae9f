"""The options that say which columns (of a table) or keys (of JSON Lines) make a job's records;
a command gets them as one `columns: Columns`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from producers.table_rows import Columns


def _names(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    names = tuple(n.strip() for n in (value or "").split(",") if n.strip())
    if len(set(names)) != len(names):
        raise click.BadParameter("a column is named twice", ctx, param)
    return names


def column_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--text-column, --image-column, --id-column, --keep-columns (tables), --text-field and
    --id-field (JSON Lines), as one `columns` argument."""

    @click.option("--text-column", default="text", show_envvar=True, help="Table input: the column of texts.")
    @click.option(
        "--image-column",
        default="image",
        show_envvar=True,
        help="Table input: the column of images, as paths (relative to the table's folder) or bytes.",
    )
    @click.option(
        "--id-column",
        default=None,
        show_envvar=True,
        help="Table input: the column of record ids (text or integers) [default: the row number across the input].",
    )
    @click.option(
        "--keep-columns",
        default=None,
        callback=_names,
        show_envvar=True,
        help="Table input: columns (a,b,...) that come back in every result: typed in Parquet/Arrow, "
        "JSON values in JSON Lines.",
    )
    @click.option("--text-field", default="text", show_envvar=True, help="JSON Lines input: the key of the text.")
    @click.option("--id-field", default="id", show_envvar=True, help="JSON Lines input: the key of the id.")
    @functools.wraps(f)
    def wrapper(
        *args: Any,
        text_column: str,
        image_column: str,
        id_column: str | None,
        keep_columns: tuple[str, ...],
        text_field: str,
        id_field: str,
        **kwargs: Any,
    ) -> Any:
        columns = Columns(text_column, image_column, id_column, keep_columns, text_field, id_field)
        return f(*args, columns=columns, **kwargs)

    return wrapper
