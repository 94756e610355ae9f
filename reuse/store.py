"""The local results store: a reuse key to its cached result's bytes, for tens of millions of keys,
with only the index (reuse/index.py, 27 to 60 bytes a key) in memory.

Each value is appended to a spool file on local disk, as one entry: the full 32-byte key, the
value's length (4 bytes, little-endian) and the value. The index maps the key to the entry's
offset in the file (Position(0, offset): one spool, so partition 0). A lookup reads the entry's
key back and serves the value only if it is the key asked for, so two keys that share their first
8 bytes (the index's word for a key) cost a miss, never another key's value. Values are never held
in memory: the file's pages are the kernel's page cache, not this process's RSS.

The spool only grows: a key written again appends a new entry and leaves the old one unreachable,
and a removed key's entry stays too. That is acceptable for what feeds it, a compacted topic read
once from the beginning and then tailed, where rewrites of a key are rare (one content, one
result); the file goes with the store (close() removes it) and a rebuild starts a fresh one.

Thread-safe for one writer and readers on other threads: one lock around the index and the file.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from reuse.index import KEY_SIZE, Position, ReuseIndex, key_prefixes

LENGTH_SIZE = 4
HEADER_SIZE = KEY_SIZE + LENGTH_SIZE
MAX_VALUE_BYTES = 2**32 - 1
SPOOL_PREFIX = "nearline-results-"


def _header(key: bytes, value: bytes) -> bytes:
    if len(key) != KEY_SIZE:
        raise ValueError(f"a reuse key is {KEY_SIZE} bytes, got {len(key)}")
    if len(value) > MAX_VALUE_BYTES:
        raise ValueError(f"a stored value is at most {MAX_VALUE_BYTES} bytes, got {len(value)}")
    return key + len(value).to_bytes(LENGTH_SIZE, "little")


class ResultStore:
    """Reuse keys to result bytes (module docstring): put, remove, get, get_many, close."""

    def __init__(self, directory: str | Path, expected: int = 0) -> None:
        """directory: where the spool file is made (a local disk with room for every value
        stored); expected: keys to size the index for up front."""
        fd, path = tempfile.mkstemp(prefix=SPOOL_PREFIX, suffix=".spool", dir=directory)
        self.path = Path(path)
        self._fd: int | None = fd
        self._end = 0
        self._expected = expected
        self._index = ReuseIndex(expected)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._index)

    @property
    def spool_bytes(self) -> int:
        """The spool file's size: every entry appended, reachable or not."""
        return self._end

    @property
    def index_bytes(self) -> int:
        """The index's table: the store's memory, values aside (none are kept)."""
        return self._index.nbytes

    def put(self, key: bytes, value: bytes) -> None:
        """Store `value` for `key`, replacing any earlier one."""
        entry = _header(key, value) + value
        with self._lock:
            at = self._append(entry)
            self._index.insert(key, Position(0, at))

    def put_many(self, entries: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Apply (key, value) entries in order, a value of None removing its key: one write to the
        spool and one batch update of the index (a topic's records, as read)."""
        if not entries:
            return
        offsets = np.full(len(entries), -1, dtype=np.int64)
        parts: list[bytes] = []
        size = 0
        for i, (key, value) in enumerate(entries):
            if value is None:
                if len(key) != KEY_SIZE:
                    raise ValueError(f"a reuse key is {KEY_SIZE} bytes, got {len(key)}")
                continue
            parts += (_header(key, value), value)
            offsets[i] = size
            size += HEADER_SIZE + len(value)
        prefixes = key_prefixes(key for key, _ in entries)
        with self._lock:
            at = self._append(b"".join(parts)) if parts else 0
            offsets[offsets >= 0] += at
            self._index.insert_many(prefixes, np.zeros(len(entries), dtype=np.int32), offsets)

    def remove(self, key: bytes) -> bool:
        """Forget `key` (a tombstone); False if it was not there."""
        with self._lock:
            return self._index.remove(key)

    def get(self, key: bytes) -> bytes | None:
        """The value stored for exactly `key`, or None."""
        with self._lock:
            position = self._index.lookup(key)
            return None if position is None else self._read(key, position.offset)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """get for each key, the index probed for all of them at once."""
        if not keys:
            return []
        prefixes = key_prefixes(keys)
        with self._lock:
            _, offsets = self._index.lookup_many(prefixes)
            return [
                None if at < 0 else self._read(key, int(at)) for key, at in zip(keys, offsets.tolist(), strict=True)
            ]

    def clear(self) -> None:
        """Forget every key and empty the spool (what is stored is rebuilt from the beginning)."""
        with self._lock:
            os.ftruncate(self._open(), 0)
            self._end = 0
            self._index = ReuseIndex(self._expected)

    def close(self) -> None:
        """Drop the store and remove its spool file; later lookups miss, later writes raise ValueError."""
        with self._lock:
            if self._fd is None:
                return
            os.close(self._fd)
            self._fd = None
            self.path.unlink(missing_ok=True)
            self._index = ReuseIndex()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> int:
        if self._fd is None:
            raise ValueError("the result store is closed")
        return self._fd

    def _append(self, data: bytes) -> int:
        """Write `data` at the spool's end; where it starts."""
        fd, at = self._open(), self._end
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, self._end)
            self._end += written
            view = view[written:]
        return at

    def _read(self, key: bytes, at: int) -> bytes | None:
        """The value of the entry at `at` if that entry is `key`'s (the full key confirmed)."""
        fd = self._open()
        header = os.pread(fd, HEADER_SIZE, at)
        if header[:KEY_SIZE] != key:
            return None
        length = int.from_bytes(header[KEY_SIZE:], "little")
        value = os.pread(fd, length, at + HEADER_SIZE)
        return value if len(value) == length else None
