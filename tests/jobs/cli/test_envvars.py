"""Every option is also an environment variable, named after its flag and shown in --help
(jobs/cli/envvars.py); the names click made from parameter names still work, with a warning."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from jobs.cli.main import cli


def helps() -> dict[str, str]:
    """Each command's --help, by its path (`worker gpu`), every command of the CLI."""
    found: dict[str, str] = {}

    def visit(path: list[str], command: click.Command) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(click.Context(command)):
                sub = command.get_command(click.Context(command, auto_envvar_prefix="NEARLINE"), name)
                assert sub is not None
                visit([*path, name], sub)
            return
        out = CliRunner().invoke(cli, [*path, "--help"], terminal_width=400)
        assert out.exit_code == 0, out.output
        found[" ".join(path)] = out.output

    visit([], cli)
    return found


def test_every_visible_option_of_every_command_shows_its_environment_variable() -> None:
    pages = helps()
    assert len(pages) > 25  # every command and subcommand
    missing = {}
    for path, page in pages.items():
        options = page.split("Options:", 1)[1]
        # one entry per option: its line starts with two spaces and a dash
        entries = re.split(r"\n(?=  -)", options.strip("\n"))
        missing[path] = [e.split()[0] for e in entries if "--help" not in e and "[env var:" not in e]
    assert {p: m for p, m in missing.items() if m} == {}


@pytest.mark.parametrize(
    ("path", "flag", "variable"),
    [
        ("status", "--json", "NEARLINE_STATUS_JSON"),  # was NEARLINE_STATUS_AS_JSON
        ("run", "--format", "NEARLINE_RUN_FORMAT"),  # was NEARLINE_RUN_FMT
        ("submit", "--timeout-s", "NEARLINE_SUBMIT_TIMEOUT_S"),
        ("offsets reset", "--to-earliest", "NEARLINE_OFFSETS_RESET_TO_EARLIEST"),  # the two shared one
        ("offsets reset", "--to-latest", "NEARLINE_OFFSETS_RESET_TO_LATEST"),
        ("offsets reset", "--to-datetime", "NEARLINE_OFFSETS_RESET_TO_DATETIME"),
        ("worker preprocess", "--session-timeout-s", "NEARLINE_WORKER_PREPROCESS_SESSION_TIMEOUT_S"),
        ("worker gpu", "--max-linger-ms", "NEARLINE_WORKER_GPU_MAX_LINGER_MS"),
    ],
)
def test_an_options_variable_is_named_after_its_flag(path: str, flag: str, variable: str) -> None:
    page = helps()[path]
    entry = next(e for e in re.split(r"\n(?=  -)", page) if e.strip().startswith(flag))
    assert f"[env var: {variable}" in " ".join(entry.split())


def test_an_old_variable_name_still_sets_its_option_and_is_warned_of() -> None:
    out = CliRunner().invoke(
        cli,
        ["offsets", "reset", "--group", "g", "--topic", "t", "--execute"],
        env={"NEARLINE_OFFSETS_RESET_TO": "latest", "NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
    )
    new = "NEARLINE_OFFSETS_RESET_TO_EARLIEST or NEARLINE_OFFSETS_RESET_TO_LATEST"
    assert f"warning: NEARLINE_OFFSETS_RESET_TO is now {new}; the old name is read until the next release" in out.output
    # the reset was asked for (to latest): what stops it is the broker that is not there
    assert "one of --to-earliest" not in out.output and "127.0.0.1:1" in out.output


def test_the_bulk_lanes_old_name_still_works_for_a_release_with_a_warning() -> None:
    """The batch lane became the bulk lane (docs/cli.md): `--priority batch`, `--batch-share` and
    NEARLINE_WORKER_GPU_BATCH_SHARE still set what they set, each with a warning."""
    from click.testing import CliRunner

    from tests.support.deploy.cli_commands import resolve

    env = {"NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    assert resolve(["submit", "in.jsonl", "-m", "m", "--priority", "batch"], env).params["priority"] == "bulk"
    assert resolve(["worker", "gpu", "-m", "m", "--batch-share", "0.3"], env).params["formerly_batch_share"] == 0.3
    carried = resolve(["worker", "gpu", "-m", "m"], {**env, "NEARLINE_WORKER_GPU_BATCH_SHARE": "0.4"})
    assert carried.params["bulk_share"] == 0.4
    out = CliRunner().invoke(cli, ["submit", "missing.jsonl", "-m", "m", "--priority", "batch"], env=env)
    assert "warning: the batch lane is now the bulk lane (--priority bulk)" in out.output
    out = CliRunner().invoke(cli, ["worker", "gpu", "-m", "m", "--batch-share", "0.3"], env=env)
    assert "warning: --batch-share is now --bulk-share" in out.output  # then the broker is not there
    out = CliRunner().invoke(cli, ["worker", "gpu", "-m", "m", "--batch-share", "2"], env=env)
    assert out.exit_code == 2 and "--batch-share" in out.output  # the old flag checks its value as the new one
