"""The options that say which columns (of a table) or keys (of JSON Lines) make a job's records,
and the defaults of its generation requests; a command gets them as one `columns: Columns`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from producers.table_rows import Columns
from schemas.generation_request import RequestDefaults, RequestError


def _names(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    names = tuple(n.strip() for n in (value or "").split(",") if n.strip())
    if len(set(names)) != len(names):
        raise click.BadParameter("a column is named twice", ctx, param)
    return names


def column_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--text-column, --image-column, --id-column, --keep-columns (tables), --text-field and
    --id-field (JSON Lines), as one `columns` argument."""

    @click.option(
        "--text-column",
        "--prompt-column",
        "text_column",
        default="text",
        show_envvar=True,
        help="Table input: the column of texts (of prompts, for a model that generates).",
    )
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
    @click.option(
        "--max-tokens",
        type=click.IntRange(min=1),
        default=None,
        show_envvar=True,
        help="Generation: the completion length of requests that name none [default: the model's].",
    )
    @click.option(
        "--temperature",
        type=click.FloatRange(0, 2),
        default=None,
        show_envvar=True,
        help="Generation: the temperature of requests that name none; 0 is greedy [default: 0].",
    )
    @click.option(
        "--system-prompt",
        default=None,
        show_envvar=True,
        help="Generation: a system message before each chat that has none; a plain prompt becomes a chat.",
    )
    @functools.wraps(f)
    def wrapper(
        *args: Any,
        text_column: str,
        image_column: str,
        id_column: str | None,
        keep_columns: tuple[str, ...],
        text_field: str,
        id_field: str,
        max_tokens: int | None,
        temperature: float | None,
        system_prompt: str | None,
        **kwargs: Any,
    ) -> Any:
        try:
            requests = RequestDefaults(max_tokens, temperature, system_prompt).check()
        except RequestError as exc:
            raise click.UsageError(str(exc)) from None
        columns = Columns(text_column, image_column, id_column, keep_columns, text_field, id_field, requests)
        return f(*args, columns=columns, **kwargs)

    return wrapper
