"""What a container's `nearline ...` command line means to the real CLI: the command it runs, its
option values, and the environment variables it reads. Parsed with click's own make_context and
resolve_command, as `nearline` would parse it, without running anything."""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import click

from jobs.cli import cli
from tests.support.deploy.manifests import ROOT

PROGRAM = "nearline"


def console_script(name: str = PROGRAM) -> str | None:
    """The entry point pyproject.toml installs under that name (jobs.cli:main for nearline)."""
    scripts: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    return scripts.get(name)


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """Exactly `env` as the NEARLINE_* variables (the test's own environment may hold some)."""
    with mock.patch.dict(os.environ):
        for key in [k for k in os.environ if k.startswith("NEARLINE_")]:
            del os.environ[key]
        os.environ.update(env)
        yield


@dataclass(frozen=True)
class Invocation:
    contexts: list[click.Context]  # the root group's first, the command that runs last

    @property
    def path(self) -> str:
        return self.contexts[-1].command_path

    @property
    def params(self) -> dict[str, Any]:
        return self.contexts[-1].params

    def envvars(self, param_name: str | None = None) -> set[str]:
        """Every variable the command reads: options' explicit envvars and the auto_envvar_prefix
        names (NEARLINE_WORKER_GPU_MODEL), of every group on the way, or of one parameter."""
        names: set[str] = set()
        for ctx in self.contexts:
            for param in ctx.command.params:
                if param_name is not None and param.name != param_name:
                    continue
                if param.envvar:
                    names.update([param.envvar] if isinstance(param.envvar, str) else param.envvar)
                if isinstance(param, click.Option) and param.allow_from_autoenv and ctx.auto_envvar_prefix:
                    names.add(f"{ctx.auto_envvar_prefix}_{(param.name or '').upper()}")
        return names


def resolve(args: list[str], env: dict[str, str]) -> Invocation:
    """Parse `nearline ARGS` under env as the CLI would; click's UsageError/BadParameter when it
    would refuse (an unknown command or option, a missing required one, a bad value)."""
    with environment(env):
        ctx = cli.make_context(PROGRAM, list(args))
        contexts = [ctx]
        group: click.Command = cli
        tokens = list(args)
        while isinstance(group, click.Group):
            # a group consumes its own leading options; what it leaves is NAME ARGS... (ctx.args)
            name = tokens[len(tokens) - len(ctx.args) - 1]
            cmd_name, command, rest = group.resolve_command(ctx, [name, *ctx.args])
            assert cmd_name is not None and command is not None  # None only when parsing resiliently
            ctx = command.make_context(cmd_name, rest, parent=ctx)
            contexts.append(ctx)
            group, tokens = command, rest
        return Invocation(contexts)
