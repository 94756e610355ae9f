"""Every option is also an environment variable, named after its flag and shown in --help
(jobs/cli/envvars.py); the names click would make from parameter names are not read."""

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


def test_a_variable_named_after_the_parameter_instead_of_the_flag_is_not_read() -> None:
    """--to-earliest and --to-latest share the parameter `to`: click's own name for it,
    NEARLINE_OFFSETS_RESET_TO, would set either; only the flags' names are read."""
    from tests.support.deploy.cli_commands import resolve

    env = {"NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    args = ["offsets", "reset", "--group", "g", "--topic", "t"]
    assert resolve(args, {**env, "NEARLINE_OFFSETS_RESET_TO": "latest"}).params["to"] is None
    assert resolve(args, {**env, "NEARLINE_OFFSETS_RESET_TO_LATEST": "1"}).params["to"] == "latest"
    assert resolve(["status", "j"], {**env, "NEARLINE_STATUS_AS_JSON": "1"}).params["as_json"] is False
    assert resolve(["status", "j"], {**env, "NEARLINE_STATUS_JSON": "1"}).params["as_json"] is True


def test_the_bulk_lane_has_one_name() -> None:
    """`batch`, the bulk lane's name before the first release, is no lane (#53)."""
    from tests.support.deploy.cli_commands import resolve

    env = {"NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    assert resolve(["submit", "in.jsonl", "-m", "m", "--priority", "bulk"], env).params["priority"] == "bulk"
    out = CliRunner().invoke(cli, ["submit", "in.jsonl", "-m", "m", "--priority", "batch"], env=env)
    assert out.exit_code == 2 and "'batch' is not one of 'live', 'bulk'" in out.output, out.output
    carried = resolve(["worker", "gpu", "-m", "m"], {**env, "NEARLINE_WORKER_GPU_BULK_SHARE": "0.4"})
    assert carried.params["bulk_share"] == 0.4
    assert (
        resolve(["worker", "gpu", "-m", "m"], {**env, "NEARLINE_WORKER_GPU_BATCH_SHARE": "0.4"}).params["bulk_share"]
        == 0.1
    )
