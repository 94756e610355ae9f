"""The project's bytecode written ahead, as `pip install` writes it: an editable install compiles
nothing, and where PYTHONDONTWRITEBYTECODE is set (this machine's image sets it) every `nearline`
command would compile each module it imports again at each start, ~0.08 CPU-s no installed copy
spends. `.ci/setup` runs this; the benchmarks that time commands call precompile() for every tree
they compare. A source changed later is compiled again at import, as for any stale .pyc.

    .venv/bin/python -m bench.bytecode [TREE]
"""

from __future__ import annotations

import compileall
import sys
import tomllib
from pathlib import Path


def packages(tree: Path) -> list[str]:
    """The top-level packages pyproject.toml ships (the one list of them), and bench."""
    listed = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    return sorted({name.split(".")[0] for name in listed} | {"bench"})


def precompile(tree: Path) -> None:
    for package in packages(tree):
        compileall.compile_dir(tree / package, quiet=1, workers=0)


if __name__ == "__main__":
    precompile(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
