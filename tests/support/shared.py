"""What the test processes (pytest-xdist's workers) make once and share: the first to ask makes it
under a file lock while the others wait for it, then every process reads the same folder. Preparing
SmolLM2 and its generate() references takes minutes of both cores; made twice at once, it took
twice that and held two test processes."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every test process of this run sees: under xdist, the workers' basetemp's parent."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """<shared root>/<name>, made by `make(folder)` in the first process that asks; a make that
    failed part way leaves no mark, so the next process that asks makes it again from nothing."""
    root = shared_root(tmp_path_factory)
    folder, made = root / name, root / f"{name}.made"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            made.touch()
    return folder
