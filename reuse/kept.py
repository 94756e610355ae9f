"""A model's results cache kept in a local file between runs of `nearline run`, whose embedded
broker keeps nothing once it stops (docs/reuse.md): what cache.<model> held at the end of a run is
written here, and produced back into the next run's broker before its workers start.

The file: MAGIC, then one entry per key: the key's length (2 bytes), the key, the value's length
(4 bytes), the value (little-endian lengths). Written whole to a temporary file beside it, then
renamed over it, so a reader sees the old file or the new one, never a part. What is written is
what a compacted topic would keep: the last value of each key, a key whose last record is a
tombstone not at all.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

MAGIC = b"nearline results cache 1\n"
_KEY_LENGTH, _VALUE_LENGTH = 2, 4
MAX_KEY_BYTES, MAX_VALUE_BYTES = 2**16 - 1, 2**32 - 1


class _Readable(Protocol):
    """What entries_of reads (a binary file)."""

    def read(self, size: int = -1, /) -> bytes: ...

    def tell(self) -> int: ...


class KeptCacheError(ValueError):
    """The file is not a kept cache, or ends inside an entry: what it says, where."""


def write_kept(path: Path, entries: Iterable[tuple[bytes, bytes | None]]) -> int:
    """Write the entries (a topic's records in order: key, value or None for a tombstone) to
    `path`, the last value of each key only; returns the entries written. Two passes over a
    temporary file, so that only the keys, never the values, are held in memory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    last: dict[bytes, int | None] = {}  # key -> the number of its last value spooled; None: removed since
    with tempfile.TemporaryFile(dir=path.parent) as spool:
        spooled = 0
        for key, value in entries:
            if value is None:
                last[key] = None
                continue
            last[key] = spooled
            spool.write(_entry(key, value))
            spooled += 1
        spool.seek(0)
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        kept = 0
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(MAGIC)
                for n, (key, value) in enumerate(entries_of(spool)):
                    if last[key] == n:
                        out.write(_entry(key, value))
                        kept += 1
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return kept


def read_kept(path: Path) -> Iterator[tuple[bytes, bytes]]:
    """The entries of a kept file, in order; KeptCacheError (after the entries before it) where
    it is not one, or ends inside an entry."""
    with path.open("rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise KeptCacheError(f"{path} is not a kept results cache (it does not start with {MAGIC!r})")
        yield from entries_of(f, path)


def entries_of(f: _Readable, path: Path | None = None) -> Iterator[tuple[bytes, bytes]]:
    """The entries of an open file from where it stands."""
    while True:
        at = f.tell()
        head = f.read(_KEY_LENGTH)
        if not head:
            return
        key = _exactly(f, int.from_bytes(head, "little"), path, at) if len(head) == _KEY_LENGTH else None
        length = f.read(_VALUE_LENGTH)
        if key is None or len(length) != _VALUE_LENGTH:
            raise KeptCacheError(f"{path or 'the kept cache'} ends inside the entry at byte {at}")
        yield key, _exactly(f, int.from_bytes(length, "little"), path, at)


def _exactly(f: _Readable, size: int, path: Path | None, at: int) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise KeptCacheError(f"{path or 'the kept cache'} ends inside the entry at byte {at}")
    return data


def _entry(key: bytes, value: bytes) -> bytes:
    if len(key) > MAX_KEY_BYTES or len(value) > MAX_VALUE_BYTES:
        raise ValueError(f"an entry of a {len(key)}-byte key and a {len(value)}-byte value is too large to keep")
    return len(key).to_bytes(_KEY_LENGTH, "little") + key + len(value).to_bytes(_VALUE_LENGTH, "little") + value
