"""README and docs/ as a reader runs them: the command blocks name real commands, in an order that works
top to bottom, and every relative link points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from jobs.cli import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```bash\n(.*?)```", re.DOTALL)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def command_lines(page: Path) -> list[list[list[str]]]:
    """Each bash block's `nearline ...` command lines, as words up to the first option or comment."""
    blocks = []
    for block in FENCE.findall(page.read_text(encoding="utf-8")):
        commands = []
        for line in block.splitlines():
            for part in re.split(r"&&|;", line.split("#", 1)[0]):
                words = part.replace("|", " ").split()
                if words and Path(words[0]).name == "nearline":  # also `.venv/bin/nearline`
                    commands.append(words)
        blocks.append(commands)
    return blocks


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


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_point_at_files_that_exist(page: Path) -> None:
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"
