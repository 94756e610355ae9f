"""Results on a full filesystem: the file is named, and a run's results (the embedded broker's only
copy) are kept where there is room and named. A real 200 KB tmpfs stands for the full disk."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from results.output import write_atomically
from tests.support.inputs import many_lines
from tests.support.pipeline import run_embedded
from tests.support.tiny_model import TinyModel

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "small"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def test_a_write_that_fills_the_disk_names_the_file_and_leaves_nothing(small_disk: Path) -> None:
    out = small_disk / "out.jsonl"
    with pytest.raises(OSError) as raised:
        write_atomically(out, lambda f: f.write("x" * 1_000_000))
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(out)
    assert list(small_disk.iterdir()) == []


@pytest.mark.parametrize("fmt", ["jsonl", "openai-batch"])
def test_a_run_to_a_full_disk_keeps_every_result_where_there_is_room_and_names_it(
    tiny: TinyModel,
    model_repository: Path,
    tmp_path: Path,
    small_disk: Path,
    monkeypatch: pytest.MonkeyPatch,
    fmt: str,
) -> None:
    # every output format goes through one writer shape, so each is kept the same way
    total = 1500  # about 300 KB of JSON Lines: more than the 200 KB filesystem takes
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # where the run's spill, and so the kept copy, go
    out = small_disk / "out.jsonl"
    done = run_embedded(
        str(many_lines(tmp_path / "in.jsonl", total)),
        "--model",
        "tiny",
        "-o",
        str(out),
        "--output-format",
        fmt,
        repository=model_repository,
    )
    assert done.returncode == 1, done.stderr
    assert f"error: cannot write {out}: No space left on device (" in done.stderr, done.stderr
    assert f" free in {small_disk})" in done.stderr and "Traceback" not in done.stderr
    (kept,) = scratch.glob("nearline-kept-*/out.jsonl")
    assert f"kept the {total} records in {kept} instead (" in done.stderr
    assert f"move the file where you want it once {small_disk} has room" in done.stderr
    assert f"wrote {total} lines to {kept}" in done.stderr
    lines = [json.loads(line) for line in kept.read_text().splitlines()]
    if fmt == "jsonl":
        assert [line["id"] for line in lines] == [f"r{i}" for i in range(total)]
        assert all(len(line["embedding"]) == 8 for line in lines)
    else:  # a plain record is a request of its own, named by its id
        assert [line["custom_id"] for line in lines] == [f"r{i}" for i in range(total)]
        assert all(len(line["response"]["body"]["data"][0]["embedding"]) == 8 for line in lines)
    assert list(small_disk.iterdir()) == []  # no half file, no temporary file
    assert not list(scratch.glob("nearline-results-*"))  # the spill itself is gone: its records are kept
