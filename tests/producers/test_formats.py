"""The registry of input formats is the one list of them: the CLI's choices and help, sniffing by
suffix and the readers all come from producers/formats.py, and no other input module names a suffix."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import click
import pytest

from jobs.cli import cli
from jobs.input_problems import stdin_format_problem
from producers.formats import (
    AUTO,
    FORMAT_NAMES,
    FORMATS,
    JSON_LINES,
    LINES,
    OPENAI_BATCH,
    InputFormat,
    auto_help,
    format_named,
)
from producers.sniffing import table_parts, text_format
from producers.tables import table_format

ROOT = Path(__file__).resolve().parents[2]
# Every module that reads users' input; only producers/formats.py may name a format's suffix.
INPUT_MODULES = [
    *sorted((ROOT / "producers").glob("*.py")),
    *(ROOT / "jobs" / name for name in ("job_input.py", "input_problems.py", "submit.py")),
    ROOT / "jobs" / "cli" / "job_submit.py",
]


def format_option(name: str) -> click.Option:
    """--format of the top-level command `name`."""
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    return next(p for p in command.params if isinstance(p, click.Option) and p.name == "fmt")


@pytest.mark.parametrize("command", ["run", "submit", "produce"])
def test_every_command_offers_the_registrys_formats_and_its_help(command: str) -> None:
    option = format_option(command)
    assert isinstance(option.type, click.Choice)
    assert tuple(option.type.choices) == FORMAT_NAMES == (AUTO, *(f.name for f in FORMATS))
    assert option.help == auto_help()
    assert all("/".join(f.suffixes) in auto_help() for f in FORMATS if f.suffixes)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_each_suffix_is_sniffed_as_its_format(tmp_path: Path, fmt: InputFormat) -> None:
    assert fmt in FORMATS and format_named(fmt.name) is fmt
    for suffix in fmt.suffixes:
        for name in (f"in{suffix}", f"IN{suffix.upper()}"):
            path = tmp_path / name
            path.write_text('{"id": 1, "text": "one"}\n')
            if fmt.table is not None:
                assert table_format(path) == fmt.name and table_parts(path) == (path,)
            else:
                assert text_format(path) is fmt and table_parts(path) == ()


def test_a_format_is_read_one_way_and_a_name_no_format_has_is_refused() -> None:
    assert all((f.read is None) != (f.table is None) for f in FORMATS)
    assert format_named(AUTO) is None
    with pytest.raises(ValueError, match="unknown input format 'avro'"):
        format_named("avro")


def test_what_no_suffix_names_is_sniffed_from_its_first_line_or_read_as_lines(tmp_path: Path) -> None:
    batch = tmp_path / "batch.jsonl"
    batch.write_text(json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}) + "\n")
    plain = tmp_path / "notes.txt"
    plain.write_text("one\n")
    assert text_format(batch) is OPENAI_BATCH and text_format(batch, JSON_LINES.name) is JSON_LINES
    assert text_format(plain) is LINES and table_parts(plain) == ()


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_stdin_is_refused_exactly_the_table_formats(fmt: InputFormat) -> None:
    problem = stdin_format_problem(fmt.name)
    assert (problem is not None) == (fmt.table is not None)


def test_no_input_module_but_the_registry_names_a_formats_suffix() -> None:
    suffixes = {s for f in FORMATS for s in f.suffixes}
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
        for path in INPUT_MODULES
        if path.name != "formats.py" or path.parent.name != "producers"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in suffixes
    ]
    assert not found, "input suffixes named outside producers/formats.py:\n" + "\n".join(found)
