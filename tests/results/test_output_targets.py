"""Where -o and --errors write when they name no plain file: standard output (`-`), a link (written
through, never replaced), a pipe or a descriptor's link (written to as it is). On real files, pipes
and links; no test touches the real /dev/stdout."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pyarrow.parquet as pq
import pytest

from results.formats import OutputFormat
from results.output import OutputPathError, check_output_path, names_stdout, write_lines, write_table


def lines(n: int) -> Callable[[Callable[[bytes], object]], int]:
    def write(put: Callable[[bytes], object]) -> int:
        for i in range(n):
            put(f'{{"id": "r{i}"}}\n'.encode())
        return n

    return write


def table(f: IO[bytes]) -> int:
    import pyarrow as pa

    pq.write_table(pa.table({"id": ["r0", "r1"]}), f)
    return 2


def write_jsonl(path: Path, n: int = 3) -> int:
    check_output_path(path)
    return write_lines(path, io.StringIO(), lines(n))


def test_a_link_to_a_file_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "results.jsonl"
    target.write_text("previous\n")
    link = tmp_path / "latest.jsonl"
    link.symlink_to(target)
    assert write_jsonl(link) == 3
    assert link.is_symlink() and link.readlink() == target
    assert target.read_text() == '{"id": "r0"}\n{"id": "r1"}\n{"id": "r2"}\n'
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["results.jsonl"]  # no temporary file left


def test_a_link_to_a_file_not_yet_written_is_refused_with_its_target(tmp_path: Path) -> None:
    link = tmp_path / "out.jsonl"
    link.symlink_to(tmp_path / "nowhere" / "x.jsonl")
    with pytest.raises(OutputPathError, match=r"is a link to .*nowhere/x\.jsonl, which does not exist"):
        check_output_path(link)
    assert link.is_symlink()


def test_a_link_to_a_descriptor_of_a_redirected_file_is_added_to_not_replaced(tmp_path: Path) -> None:
    """`-o LINK > out.jsonl` with LINK -> /proc/self/fd/1: the link was renamed over, the redirect
    got 0 bytes. Here the descriptor is one of this process's, as a shell's redirect would be."""
    redirect = tmp_path / "redirect.jsonl"
    with redirect.open("ab") as held:
        held.write(b"first\n")
        held.flush()
        link = tmp_path / "out.jsonl"
        link.symlink_to(f"/proc/self/fd/{held.fileno()}")
        assert write_jsonl(link, 2) == 2
    assert link.is_symlink()
    assert redirect.read_text() == 'first\n{"id": "r0"}\n{"id": "r1"}\n'


def test_a_link_to_a_pipe_descriptor_feeds_the_pipe(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    link = tmp_path / "out.jsonl"
    link.symlink_to(f"/dev/fd/{write_end}")  # /dev/fd is itself a link to /proc/self/fd
    try:
        assert write_jsonl(link, 2) == 2
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        assert pipe.read() == b'{"id": "r0"}\n{"id": "r1"}\n'
    assert link.is_symlink()


@pytest.mark.parametrize("fmt", [OutputFormat.JSONL, OutputFormat.PARQUET])
def test_a_fifo_is_written_to_in_any_format_and_stays_a_fifo(tmp_path: Path, fmt: OutputFormat) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    check_output_path(fifo)
    written = write_lines(fifo, io.StringIO(), lines(2)) if fmt is OutputFormat.JSONL else write_table(fifo, table)
    reader.join(timeout=30)
    assert written == 2 and fifo.is_fifo()
    if fmt is OutputFormat.PARQUET:
        assert pq.read_table(io.BytesIO(got[0])).column("id").to_pylist() == ["r0", "r1"]
    else:
        assert got == [b'{"id": "r0"}\n{"id": "r1"}\n']


def test_a_character_device_is_written_to_not_replaced() -> None:
    assert write_jsonl(Path("/dev/null")) == 3
    assert Path("/dev/null").is_char_device()


@pytest.mark.parametrize(("name", "means"), [("-", True), ("/dev/stdout", True), ("results/-", False), ("out", False)])
def test_a_dash_and_dev_stdout_name_standard_output(name: str, means: bool) -> None:
    assert names_stdout(Path(name)) is means
    check_output_path(Path("-"))  # never a file named `-` to check, nor /dev/stdout to replace
