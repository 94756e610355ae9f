"""The results cache `nearline run` keeps on disk between runs (reuse/kept.py): the last value of
each key, tombstoned keys left out; a file cut inside an entry gives the entries before it and
says where; a file that is not one is refused; a write that fails leaves the old file whole."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reuse.kept import MAGIC, KeptCacheError, read_kept, write_kept


def test_the_last_value_of_each_key_is_kept_in_the_order_written_and_a_removed_key_is_not(tmp_path: Path) -> None:
    a, b, c = os.urandom(32), os.urandom(32), b"runtime"
    path = tmp_path / "kept" / "minilm.cache"
    written = write_kept(
        path,
        [(a, b"old a"), (b, b"b"), (c, b"onnxruntime/CPUExecutionProvider"), (a, b"new a"), (b, None), (c, b"")],
    )
    assert written == 2
    assert list(read_kept(path)) == [(a, b"new a"), (c, b"")]
    assert path.read_bytes().startswith(MAGIC)
    assert write_kept(path, []) == 0 and list(read_kept(path)) == []


def test_a_file_cut_inside_an_entry_gives_the_entries_before_and_says_where(tmp_path: Path) -> None:
    path = tmp_path / "minilm.cache"
    entries = [(os.urandom(32), os.urandom(1500)) for _ in range(3)]
    write_kept(path, entries)
    whole = path.read_bytes()
    for cut in (len(whole) - 1, len(whole) - 1500, len(whole) - 1505, len(whole) - 1537):
        path.write_bytes(whole[:cut])
        got: list[tuple[bytes, bytes]] = []
        with pytest.raises(KeptCacheError, match=rf"{path} ends inside the entry at byte \d+"):
            for entry in read_kept(path):
                got.append(entry)
        assert got == entries[:2]


def test_a_file_that_is_not_a_kept_cache_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "minilm.cache"
    path.write_bytes(b'{"not": "a cache"}\n')
    with pytest.raises(KeptCacheError, match="is not a kept results cache"):
        list(read_kept(path))


def test_a_write_that_fails_leaves_the_old_file_whole_and_nothing_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "minilm.cache"
    old = [(os.urandom(32), b"kept before")]
    write_kept(path, old)

    def broken() -> Iterator[tuple[bytes, bytes | None]]:
        yield os.urandom(32), b"new"
        raise OSError("the broker went away")

    with pytest.raises(OSError, match="went away"):
        write_kept(path, broken())
    assert list(read_kept(path)) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["minilm.cache"]
