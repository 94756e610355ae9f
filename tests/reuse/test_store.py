"""The local results store: values on a spool file behind the reuse index, confirmed by full key."""

from __future__ import annotations

import gc
import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from reuse.store import ResultStore


def keyed(prefix: int) -> bytes:
    """A random key whose first 8 bytes (the index's word for it) are `prefix`."""
    return prefix.to_bytes(8, "little") + os.urandom(24)


def test_a_value_put_is_got_back_replaced_and_removed(tmp_path: Path) -> None:
    with ResultStore(tmp_path) as store:
        a, b = os.urandom(32), os.urandom(32)
        store.put(a, b"first")
        store.put(b, b"")
        assert store.get(a) == b"first" and store.get(b) == b"" and len(store) == 2
        store.put(a, b"second, longer than the first")
        assert store.get(a) == b"second, longer than the first" and len(store) == 2
        assert store.remove(a) and not store.remove(a)
        assert store.get(a) is None and store.get(b) == b"" and len(store) == 1
        assert store.get(os.urandom(32)) is None


def test_two_keys_of_one_prefix_never_get_each_others_value(tmp_path: Path) -> None:
    first, second = keyed(0xFEED_BEEF_0000_0001), keyed(0xFEED_BEEF_0000_0001)
    with ResultStore(tmp_path) as store:
        store.put(first, b"first's result")
        assert store.get(second) is None and store.get_many([second, first]) == [None, b"first's result"]
        store.put(second, b"second's result")  # the index holds one position a prefix: second's now
        assert store.get(second) == b"second's result"
        assert store.get(first) is None and store.get_many([first, second]) == [None, b"second's result"]


def test_get_many_and_put_many_agree_with_one_at_a_time(tmp_path: Path) -> None:
    keys = [os.urandom(32) for _ in range(3_000)]
    with ResultStore(tmp_path) as store:
        store.put_many([(k, i.to_bytes(4, "little") * (i % 7)) for i, k in enumerate(keys)])
        # in order, the last word on a key winning: a tombstone for every third key, then one key again
        store.put_many([*((k, None) for k in keys[::3]), (keys[0], b"back")])
        expected = [b"back"] + [None if i % 3 == 0 else i.to_bytes(4, "little") * (i % 7) for i in range(1, len(keys))]
        assert store.get_many(keys) == expected
        assert [store.get(k) for k in keys] == expected
        assert len(store) == sum(v is not None for v in expected)
        assert store.get_many([]) == [] and store.get_many([os.urandom(32)]) == [None]


def test_a_key_that_is_not_32_bytes_is_refused(tmp_path: Path) -> None:
    with ResultStore(tmp_path) as store:
        with pytest.raises(ValueError, match="32 bytes"):
            store.put(b"short", b"v")
        with pytest.raises(ValueError, match="32 bytes"):
            store.put_many([(os.urandom(32), b"v"), (b"short", None)])
        assert len(store) == 0


def test_clear_empties_and_close_removes_the_spool(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    key = os.urandom(32)
    store.put(key, b"x" * 1000)
    assert store.path.parent == tmp_path and store.path.stat().st_size == store.spool_bytes == 32 + 4 + 1000
    store.clear()
    assert store.get(key) is None and len(store) == 0 and store.path.stat().st_size == 0
    store.put(key, b"y")
    assert store.get(key) == b"y"
    store.close()
    assert not store.path.exists() and list(tmp_path.iterdir()) == []
    store.close()  # twice is fine
    assert store.get(key) is None and store.get_many([key]) == [None] and len(store) == 0
    with pytest.raises(ValueError, match="closed"):
        store.put(key, b"z")


def test_values_live_on_disk_not_in_memory(tmp_path: Path) -> None:
    """100k results of 1.5 KB (146 MiB) leave the index's size allocated, not the values'.
    Counted by tracemalloc (which numpy's buffers report to), not by RSS: RSS also holds what the
    C allocator keeps of freed chunks and growth copies, which varied by 20 MiB between runs."""
    tracing = tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        gc.collect()
        before, _ = tracemalloc.get_traced_memory()
        with ResultStore(tmp_path) as store:
            keys = []
            for _ in range(100):
                chunk = [(os.urandom(32), os.urandom(1536)) for _ in range(1_000)]
                store.put_many(chunk)
                keys.append(chunk[0])
                del chunk
            gc.collect()
            added = tracemalloc.get_traced_memory()[0] - before
            assert len(store) == 100_000 and store.spool_bytes == 100_000 * (32 + 4 + 1536)
            assert all(store.get(k) == v for k, v in keys)
            # the index: 2^18 slots of 20 bytes (5 MiB); `keys`: 160 KB; the values: 146 MiB
            assert store.index_bytes == 2**18 * 20
            assert added < store.index_bytes + 2**20, f"{added / 2**20:.1f} MiB allocated"
    finally:
        if not tracing:
            tracemalloc.stop()


def test_lookups_on_one_thread_see_every_value_another_has_put(tmp_path: Path) -> None:
    with ResultStore(tmp_path) as store:
        written: list[tuple[bytes, bytes]] = []
        done = threading.Event()
        wrong: list[bytes] = []

        def write() -> None:
            for i in range(20_000):  # the index grows many times meanwhile
                key = os.urandom(32)
                store.put(key, key * (1 + i % 5))
                written.append((key, key * (1 + i % 5)))
            done.set()

        writer = threading.Thread(target=write)
        writer.start()
        reads = 0
        while not done.is_set() or reads == 0:
            seen = list(written[-50:])
            got = store.get_many([k for k, _ in seen])
            wrong += [k for (k, v), g in zip(seen, got, strict=True) if g != v]
            wrong += [k for k, v in seen[:5] if store.get(k) != v]
            reads += len(seen)
        writer.join()
        assert not wrong and reads > 0 and len(store) == 20_000
