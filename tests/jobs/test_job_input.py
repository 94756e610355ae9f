"""A scheduled input's glob as one job input, and what validation keeps for the produce, without a broker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.cli.validators import opened_input
from jobs.job_input import _RECORD_BYTES, JobInput
from producers import InputRecord
from schemas.packs import PackSettings, read_raw_text_pack
from tests.support.records import raw_texts_in, value


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
    assert source.validate_keeping(0)[:2] == (3, [])


def test_a_globs_ids_are_the_same_whether_it_matches_one_file_or_many(tmp_path: Path) -> None:
    """A schedule's glob matched one file on one tick and two on the next: its ids changed
    ("1" then "a.jsonl:1"), so the same record had two ids. The prefix is now the path below the
    glob's fixed folder, whatever it matches."""
    drop = tmp_path / "drop"
    (drop / "2024").mkdir(parents=True)
    (drop / "2024" / "a.jsonl").write_text('{"text": "one"}\n')

    def ids(pattern: Path) -> list[str]:
        return [r.record_id for r in JobInput.matching(str(pattern)).read() if isinstance(r, InputRecord)]

    assert ids(drop / "*" / "*.jsonl") == ["2024/a.jsonl:1"]
    assert ids(drop / "2024" / "*.jsonl") == ["a.jsonl:1"]
    (drop / "2024" / "b.jsonl").write_text('{"text": "two"}\n')
    (drop / "2025").mkdir()
    (drop / "2025" / "c.jsonl").write_text('{"text": "three"}\n')
    assert ids(drop / "*" / "*.jsonl") == ["2024/a.jsonl:1", "2024/b.jsonl:1", "2025/c.jsonl:1"]
    assert ids(drop / "2024" / "*.jsonl") == ["a.jsonl:1", "b.jsonl:1"]
    assert ids(drop / "2024" / "a.jsonl") == ["1"]  # a plain path is not a glob: no prefix


def test_a_glob_that_matches_nothing_or_mixes_kinds_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="matches no file"):
        JobInput.matching(str(tmp_path / "*.jsonl"))
    (tmp_path / "a.txt").write_text("text\n")
    (tmp_path / "b.jpg").write_bytes(b"\xff\xd8\xff")
    with pytest.raises(ValueError, match="both text and image"):
        JobInput.matching(str(tmp_path / "*"))


def test_the_note_on_files_an_image_folder_leaves_out_is_one_bounded_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.jpg").write_bytes(b"x")
    for i in range(40):
        (tmp_path / f"frame{i}.dat").write_bytes(b"x")
    for suffix in ("heic", "txt", "csv", "json", "md", "raw", "cr2"):
        (tmp_path / f"x.{suffix}").write_bytes(b"x")
    (tmp_path / "A\nforged: line.txt").write_bytes(b"x")
    opened_input(str(tmp_path), "auto", "auto", 1000, False)
    [line] = capsys.readouterr().err.splitlines()  # one line, whatever the names hold
    assert line.startswith(f"note: left out 48 files of {tmp_path} that are not images by name (40 .dat, 2 .txt, ")
    assert "and 3 more of 3 other suffixes; first " + str(tmp_path / "A\\nforged: line.txt") in line


def test_one_file_left_out_is_said_in_the_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.jpg").write_bytes(b"x")
    (tmp_path / "IMG_1.HEIC").write_bytes(b"x")
    opened_input(str(tmp_path), "auto", "auto", 1000, False)
    err = capsys.readouterr().err
    assert f"left out 1 file of {tmp_path} that is not an image by name (1 .heic; first " in err


def test_validation_keeps_the_valid_records_so_the_produce_does_not_read_the_input_again(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "text": "one"}\n{"id": "b", "text": " "}\n{"id": "c", "text": "three"}\n')
    source = JobInput.open(str(path))
    valid, errors, kept = source.validate_keeping()
    assert (valid, [(e.line, e.reason) for e in errors]) == (2, [(2, "text is empty")])
    path.write_text('{"id": "z", "text": "changed since"}\n')  # read again, this would be produced
    produced = raw_texts_in(value(r) for r in source.out_records("job", "tiny", "raw.text", [], 1, kept))
    assert [(r.record_id, r.seq, r.text) for r in produced] == [("a", 0, "one"), ("c", 1, "three")]


def test_records_past_the_memory_cap_are_not_kept_and_the_input_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "text": "one"}\n{"id": "c", "text": "three"}\n')
    source = JobInput.open(str(path))
    both = _RECORD_BYTES + len("one") + _RECORD_BYTES + len("three")
    assert [r.record_id for r in source.validate_keeping(both)[2] or []] == ["a", "c"]
    valid, errors, kept = source.validate_keeping(both - 1)  # all or none: a part would be produced twice
    assert (valid, errors, kept) == (2, [], None)
    produced = raw_texts_in(value(r) for r in source.out_records("job", "tiny", "raw.text", [], 1, kept))
    assert [(r.record_id, r.text) for r in produced] == [("a", "one"), ("c", "three")]


def test_texts_go_out_in_packs_of_at_most_max_records_with_seqs_in_input_order(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(f'{{"id": "r{i}", "text": "text {i}", "lang": "en"}}\n' for i in range(7)))
    source = JobInput.open(str(path))
    out = list(source.out_records("job", "tiny", "raw.text", [], 5, limits=PackSettings(max_records=3)))
    assert [r.key for r in out] == [b"job/r0", b"job/r3", b"job/r6"]
    assert [dict(r.headers)["records"] for r in out] == [b"3", b"3", b"1"]
    packs = [read_raw_text_pack(value(r)) for r in out]
    assert [p.record_ids for p in packs] == [["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6"]]
    assert [p.seqs.tolist() for p in packs] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [p.texts for p in packs] == [["text 0", "text 1", "text 2"], ["text 3", "text 4", "text 5"], ["text 6"]]
    assert {(p.job_id, p.model, p.submitted_at) for p in packs} == {("job", "tiny", 5)}
    assert [p.attributes for p in packs] == [[{}, {}, {}], [{}, {}, {}], [{}]]


def test_pack_limits_come_from_the_environment_and_a_bad_one_is_named() -> None:
    from jobs.job_input import DEFAULT_PACK_LIMITS, pack_limits_from_env

    assert pack_limits_from_env({}) == DEFAULT_PACK_LIMITS == PackSettings(128, 512 * 1024)
    assert pack_limits_from_env({"NEARLINE_PACK_RECORDS": "1"}) == PackSettings(1, 512 * 1024)
    assert pack_limits_from_env({"NEARLINE_PACK_RECORDS": " 16 ", "NEARLINE_PACK_BYTES": "4096"}) == PackSettings(
        16, 4096
    )
    for bad in ("0", "-3", "1.5", "lots"):
        with pytest.raises(ValueError, match=f"NEARLINE_PACK_RECORDS='{bad}': a pack's limit must be a whole number"):
            pack_limits_from_env({"NEARLINE_PACK_RECORDS": bad})


@pytest.mark.process
def test_a_bad_pack_limit_stops_every_command_before_it_reads_input(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "submit", str(tmp_path / "in.txt"), "--model", "tiny"],
        env={**os.environ, "NEARLINE_PACK_BYTES": "0"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "NEARLINE_PACK_BYTES='0': a pack's limit must be a whole number" in done.stderr
