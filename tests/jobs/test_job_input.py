"""A scheduled input's glob as one job input, without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.submit import JobInput
from producers import InputRecord


def test_a_glob_is_one_input_whose_ids_name_their_file(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"text": "one"}\n{"id": "x", "text": "two"}\n')
    (tmp_path / "in" / "b.txt").write_text("three\n")
    source = JobInput.matching(str(tmp_path / "in" / "*"))
    assert source.kind == "text"
    records = [r for r in source.read() if isinstance(r, InputRecord)]
    assert [(r.record_id, r.text) for r in records] == [
        ("a.jsonl:1", "one"),
        ("a.jsonl:x", "two"),
        ("b.txt:1", "three"),
    ]
    assert source.validate() == (3, [])


def test_a_glob_that_matches_nothing_or_mixes_kinds_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="matches no file"):
        JobInput.matching(str(tmp_path / "*.jsonl"))
    (tmp_path / "a.txt").write_text("text\n")
    (tmp_path / "b.jpg").write_bytes(b"\xff\xd8\xff")
    with pytest.raises(ValueError, match="both text and image"):
        JobInput.matching(str(tmp_path / "*"))
