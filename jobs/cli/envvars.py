"""Every visible option's environment variable: named after its flag, shown in --help.

click's automatic names come from the parameter's name (`--json` was NEARLINE_STATUS_AS_JSON,
`--format` NEARLINE_RUN_FMT, and `--to-earliest` and `--to-latest` shared NEARLINE_OFFSETS_RESET_TO);
here each option gets NEARLINE_<COMMAND>_<FLAG> instead, once, when its command is loaded. The old
name is still read (click falls back to it) and warned of, for one release.
"""

from __future__ import annotations

import os

import click

# Variables of options renamed with their flag (options.py: formerly), which click no longer derives
# from any parameter name: their values are carried over to the new names, with a warning.
FORMER_VARIABLES = {"NEARLINE_WORKER_GPU_BATCH_SHARE": "NEARLINE_WORKER_GPU_BULK_SHARE"}


def flag_envvar(prefix: str, option: click.Option) -> str:
    """NEARLINE_<COMMAND PATH>_<LONG FLAG>: `--worker-grace-s` of `submit` is NEARLINE_SUBMIT_WORKER_GRACE_S."""
    longs = [o for o in option.opts if o.startswith("--")]
    flag = longs[0][2:] if longs else (option.name or "")
    return f"{prefix}_{flag.upper().replace('-', '_')}"


def name_envvars(command: click.Command, prefix: str) -> dict[str, list[str]]:
    """Name and show the environment variable of every visible option of `command` and its
    subcommands; returns the old (parameter) names that changed, each with its new names."""
    renamed: dict[str, list[str]] = {}
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            for old, new in name_envvars(sub, f"{prefix}_{name.upper().replace('-', '_')}").items():
                renamed.setdefault(old, []).extend(new)
    for option in command.params:
        if not isinstance(option, click.Option) or option.hidden or not option.allow_from_autoenv:
            continue
        if not option.envvar:
            option.envvar = flag_envvar(prefix, option)
            old = f"{prefix}_{(option.name or '').upper()}"
            if old != option.envvar:
                renamed.setdefault(old, []).append(option.envvar)
        option.show_envvar = True
    return renamed


def warn_of_old_names(renamed: dict[str, list[str]]) -> None:
    """Say which old names the environment still sets (their values are still read)."""
    for old, former_new in FORMER_VARIABLES.items():
        value = os.environ.get(old)
        if value and not os.environ.get(former_new):
            os.environ[former_new] = value
            click.echo(f"warning: {old} is now {former_new}; the old name is read until the next release", err=True)
    for old, new in sorted(renamed.items()):
        if os.environ.get(old) and not any(os.environ.get(n) for n in new):
            click.echo(
                f"warning: {old} is now {' or '.join(new)}; the old name is read until the next release",
                err=True,
            )
