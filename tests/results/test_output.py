"""The -o checks and the write-then-rename, on real files (no broker)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

import pytest

from results.output import OutputPathError, check_output_path, write_atomically


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("missing/out.jsonl", "does not exist"),
        ("a-folder", "is a folder"),
        ("/proc/version", "cannot create files in folder /proc"),  # a regular file, in a folder that takes none
    ],
)
def test_an_output_path_that_cannot_take_a_file_is_refused(tmp_path: Path, name: str, reason: str) -> None:
    (tmp_path / "a-folder").mkdir()
    with pytest.raises(OutputPathError, match=reason):
        check_output_path(tmp_path / name)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_folder_is_refused(tmp_path: Path) -> None:
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(OutputPathError, match="cannot create files"):
            check_output_path(tmp_path / "out.jsonl")
    finally:
        tmp_path.chmod(0o755)


def test_a_new_or_existing_file_in_a_writable_folder_is_accepted(tmp_path: Path) -> None:
    check_output_path(tmp_path / "new.jsonl")
    (tmp_path / "old.jsonl").write_text("x\n")
    check_output_path(tmp_path / "old.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.jsonl"]  # the probe file is gone


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("previous results\n")

    def half_then_fail(f: IO[str]) -> int:
        f.write("half a line")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(out, half_then_fail)
    assert out.read_text() == "previous results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_a_completed_write_replaces_the_file_with_the_usual_permissions(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("previous results\n")
    assert write_atomically(out, lambda f: f.write("new\n") and 1) == 1
    assert out.read_text() == "new\n"
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_json_lines_hold_each_output_to_8_decimals_and_odd_strings_still_make_a_line(tmp_path: Path) -> None:
    """orjson writes the arrays; a string it refuses (a lone surrogate) falls back to json."""
    import io
    import json

    import numpy as np

    from schemas import InferenceResult, Tensor
    from tests.support.item_output import write_items

    vectors = np.random.default_rng(3).standard_normal((3, 384)).astype(np.float32) / 20
    ids = ["r0", "r1 \u00e9\u4e2d", "r2 \ud800"]
    items = [
        InferenceResult("job", rid, i, "m", "1", (Tensor.from_array("embedding", vectors[i]),), "b", 3, {"k": "v"})
        for i, rid in enumerate(ids)
    ]
    out = io.StringIO()
    assert write_items(items, items[0], None, out) == 3
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["id"] for line in lines] == ids
    for line, vector in zip(lines, vectors, strict=True):
        assert line["embedding"] == np.round(vector.astype(np.float64), 8).tolist()
        assert line["attributes"] == {"k": "v"} and line["model_version"] == "1"
    (tmp_path / "out.jsonl").write_text(out.getvalue(), encoding="utf-8")  # every line is UTF-8 text


def test_the_rounding_of_every_json_output_is_numpys_to_the_bit() -> None:
    """results.outcome.rounded (np.round's steps in place) against np.round itself, over magnitudes
    from 1e-12 to 1e30, both signs, zeros, the float32 extremes, infinities and NaN."""
    import numpy as np

    from results.outcome import rounded

    rng = np.random.default_rng(11)
    scales = [10.0**e for e in range(-12, 31, 3)]
    values = np.concatenate([rng.standard_normal(2000).astype(np.float32) * s for s in scales])
    edges = np.array([0.0, -0.0, 0.5e-8, -0.5e-8, 1.5e-8, 3.4e38, -3.4e38, 1e-45, np.inf, -np.inf, np.nan], np.float32)
    scalars = (np.array(0.123456789, np.float32), np.array(-2.5e-9, np.float32))  # scalar outputs: 0-d
    for array in (values, edges, values.reshape(-1, 8), values.astype(np.float64), *scalars):
        expected = np.round(np.asarray(array).astype(np.float64), 8)
        assert type(rounded(array)) is type(expected)
        assert rounded(array).tobytes() == expected.tobytes()
    source = values.copy()
    rounded(source.astype(np.float64))
    assert np.array_equal(source, values)  # the input is never changed in place
