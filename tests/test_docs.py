"""README and docs/ as a reader runs them: the command blocks name real commands, with flags those
commands have, in an order that works top to bottom; docs/cli.md's prose names only real flags of
the commands it names; and every relative link points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from jobs.cli import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```bash\n(.*?)```", re.DOTALL)
ANY_FENCE = re.compile(r"```.*?```", re.DOTALL)
INLINE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
FLAG = re.compile(r"--?[A-Za-z][\w-]*")  # `--max-batch-size`, `-o`; not `-` (stdin) or `-5`


def block_commands(block: str) -> list[list[str]]:
    """A bash block's `nearline ...` command lines, as words, comments left out. A line ending in a
    backslash goes on in the next; a line that starts with an option (`    [--timeout-s S]`) adds
    options to the command above it, as the docs write a command's further options. `a|b` (one
    word) is a choice of either, as words; a spaced ` | ` is a shell pipe."""
    commands: list[list[str]] = []
    joined = re.sub(r"\\\n", " ", block)
    for line in joined.splitlines():
        code = line.split("#", 1)[0]
        first = code.split()[:1]
        if first and first[0].lstrip("[").startswith("-") and commands:
            commands[-1].extend(code.replace("|", " ").split())
            continue
        for part in re.split(r"&&|;| \| ", code):
            words = part.replace("|", " ").split()
            if words and Path(words[0]).name == "nearline":  # also `.venv/bin/nearline`
                commands.append(words)
    return commands


def command_lines(page: Path) -> list[list[list[str]]]:
    """Each bash block's `nearline ...` command lines (block_commands)."""
    return [block_commands(block) for block in FENCE.findall(page.read_text(encoding="utf-8"))]


def subcommand_path(words: list[str]) -> list[str]:
    """The group and command names a line invokes: `nearline schedule add nightly` -> [schedule, add]."""
    path: list[str] = []
    group: click.Command = cli
    for word in words[1:]:
        if not isinstance(group, click.Group) or word.startswith("-"):
            break
        command = group.get_command(click.Context(group), word)
        if command is None:
            break
        path.append(word)
        group = command
    return path


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_command_follows_a_stopped_broker_in_a_block(page: Path) -> None:
    for block in command_lines(page):
        paths = [subcommand_path(words) for words in block]
        if ["broker", "stop"] in paths:
            after = paths[paths.index(["broker", "stop"]) + 1 :]
            assert not after, f"{page.name}: a reader running the block top to bottom stops the broker before {after}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_in_the_docs_is_a_real_command(page: Path) -> None:
    for block in command_lines(page):
        for words in block:
            path = subcommand_path(words)
            assert path, f"{page.name}: {' '.join(words)!r} names no nearline command"
            leaf = cli
            for name in path:
                assert isinstance(leaf, click.Group)
                leaf = leaf.get_command(click.Context(leaf), name)  # type: ignore[assignment]
            assert not isinstance(leaf, click.Group), f"{page.name}: {' '.join(words)!r} stops at a group"


def leaf_command(path: list[str]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), name)
        assert found is not None
        command = found
    return command


def unknown_flags(words: list[str]) -> list[str]:
    """The options in a `nearline ...` line that the command it names does not have (hidden ones,
    the old names kept for a release, count as had). Empty where the line names no command: the
    command test says so."""
    path = subcommand_path(words)
    command = leaf_command(path)
    if not path or isinstance(command, click.Group):
        return []
    known = {opt for param in command.get_params(click.Context(command)) for opt in param.opts + param.secondary_opts}
    flags = [m.group() for word in words[len(path) + 1 :] if (m := FLAG.fullmatch(word.strip("[](),").split("=")[0]))]
    return [flag for flag in flags if flag not in known]


def prose_commands(text: str) -> list[list[str]]:
    """The inline code spans outside code blocks that name a command and give it an option
    (`worker gpu --max-linger-ms`, `nearline status JOB --json`), as words of a `nearline` line."""
    commands = []
    for span in INLINE.findall(ANY_FENCE.sub("", text)):
        words = span.replace("|", " ").split()
        if words and words[0] != "nearline":
            words = ["nearline", *words]
        if len(words) > 1 and subcommand_path(words) and any(w.startswith("-") for w in words):
            commands.append(words)
    return commands


def flag_errors(page_name: str, text: str, prose: bool) -> list[str]:
    """Every option documented for a command it is not an option of: in bash blocks, and (prose)
    in inline code spans."""
    lines = [words for block in FENCE.findall(text) for words in block_commands(block)]
    if prose:
        lines += prose_commands(text)
    return [
        f"{page_name}: {' '.join(words)!r}: {' '.join(subcommand_path(words))} has no {flag}"
        for words in lines
        for flag in unknown_flags(words)
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_option_in_the_docs_is_an_option_of_its_command(page: Path) -> None:
    errors = flag_errors(page.name, page.read_text(encoding="utf-8"), prose=page.name == "cli.md")
    assert not errors, "\n".join(errors)


def test_the_option_check_finds_a_made_up_option_in_a_block_in_a_continuation_and_in_prose() -> None:
    page = (
        "Run `worker gpu --max-linger-ms 5 --made-up-prose` or `status --json`.\n"
        "```bash\n"
        "nearline submit in.jsonl --model minilm --made-up-flag  # --not-this-one, a comment\n"
        "nearline schedule add nightly --cron '0 3 * * *' \\\n"
        "    --input x --made-up-continued\n"
        "nearline submit in.jsonl --model minilm --wait\n"
        "    [--timeout-s S] [--made-up-bracketed S]\n"
        "cat in.txt | nearline produce raw.text - --model minilm -Z | jq -r .id\n"
        "nearline schedule pause|resume nightly --made-up-either\n"
        "```\n"
    )
    errors = flag_errors("page.md", page, prose=True)
    named = [error.rsplit(" has no ", 1)[1] for error in errors]
    assert named == [
        "--made-up-flag",
        "--made-up-continued",
        "--made-up-bracketed",
        "-Z",
        "--made-up-either",
        "--made-up-prose",
    ], errors
    assert "worker gpu has no --made-up-prose" in errors[-1]
    real = re.sub(r" \[?--made-up-[a-z-]+(?: S\])?| -Z", "", page)
    assert "made-up" not in real and flag_errors("page.md", real, prose=True) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_point_at_files_that_exist(page: Path) -> None:
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"
