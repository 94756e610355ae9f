"""A schedule whose column options cannot apply to its input, by the input's name, is refused when
it is added: stored, every tick's job would fail on them."""

from __future__ import annotations

import pytest

from jobs.scheduling.errors import ScheduleSpecError
from jobs.scheduling.schedules import ScheduleSpec, new_schedule
from producers.table_rows import Columns


@pytest.mark.parametrize(
    ("pattern", "columns", "says"),
    [
        ("/data/*.jsonl", Columns(text="body"), "--text-column applies only to table inputs"),
        ("/data/*.parquet", Columns(text_field="body"), "--text-field applies only to JSON Lines input"),
    ],
)
def test_column_options_the_inputs_name_rules_out_are_refused_at_add(pattern: str, columns: Columns, says: str) -> None:
    with pytest.raises(ScheduleSpecError, match=says) as refused:
        new_schedule(ScheduleSpec("nightly", "0 3 * * *", pattern, "minilm", columns=columns))
    assert "every tick's job would fail on it" in str(refused.value)


@pytest.mark.parametrize(
    ("pattern", "columns"),
    [
        ("/data/*.jsonl", Columns(text_field="body")),
        ("/data/*.parquet", Columns(text="body", keep=("stars",))),
        ("/data/exports/*", Columns(text="body")),  # the name does not say: each tick's files do
    ],
)
def test_options_that_fit_the_inputs_name_are_stored(pattern: str, columns: Columns) -> None:
    stored = new_schedule(ScheduleSpec("nightly", "0 3 * * *", pattern, "minilm", columns=columns))
    assert Columns.from_json(stored.columns) == columns
