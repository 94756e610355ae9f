"""Every visible option's environment variable: named after its flag, shown in --help.

click's automatic names come from the parameter's name (`--json`, whose parameter is `as_json`,
would be NEARLINE_STATUS_AS_JSON, and `--to-earliest` and `--to-latest` would share
NEARLINE_OFFSETS_RESET_TO); here each option gets NEARLINE_<COMMAND>_<FLAG> instead, once, when
its command is loaded, and that is the only name read: click's automatic one is turned off where
it differs.
"""

from __future__ import annotations

import click


def flag_envvar(prefix: str, option: click.Option) -> str:
    """NEARLINE_<COMMAND PATH>_<LONG FLAG>: `--worker-grace-s` of `submit` is NEARLINE_SUBMIT_WORKER_GRACE_S."""
    longs = [o for o in option.opts if o.startswith("--")]
    flag = longs[0][2:] if longs else (option.name or "")
    return f"{prefix}_{flag.upper().replace('-', '_')}"


def name_envvars(command: click.Command, prefix: str) -> None:
    """Name and show the environment variable of every visible option of `command` and its subcommands."""
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            name_envvars(sub, f"{prefix}_{name.upper().replace('-', '_')}")
    for option in command.params:
        if not isinstance(option, click.Option) or option.hidden or not option.allow_from_autoenv:
            continue
        if not option.envvar:
            option.envvar = flag_envvar(prefix, option)
            # click also reads its own name, NEARLINE_<COMMAND>_<PARAMETER>, when the flag's is
            # unset: off where the two differ, so that one name sets each option
            option.allow_from_autoenv = f"{prefix}_{(option.name or '').upper()}" == option.envvar
        option.show_envvar = True
