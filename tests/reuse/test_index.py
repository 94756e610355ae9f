"""The reuse index: keys to cache positions, prefix collisions, growth and tombstones."""

from __future__ import annotations

import os

import numpy as np
import pytest

from reuse.index import REPLAY_BATCH, Position, ReuseIndex, key_prefixes


def keyed(prefix: int, rest: bytes = b"") -> bytes:
    """A key whose first 8 bytes are `prefix` (little-endian), the rest random unless given."""
    return prefix.to_bytes(8, "little") + (rest or os.urandom(24))


def test_every_key_inserted_is_found_as_the_table_grows() -> None:
    index = ReuseIndex()
    keys = [os.urandom(32) for _ in range(5_000)]
    capacities = set()
    for i, key in enumerate(keys):
        index.insert(key, Position(i % 3, 10 * i))
        capacities.add(index.capacity)
    assert len(index) == 5_000 and len(capacities) > 5  # it grew, more than once
    assert all(index.lookup(key) == Position(i % 3, 10 * i) for i, key in enumerate(keys))
    assert all(index.lookup(os.urandom(32)) is None for _ in range(1_000))
    assert index.capacity * 0.75 >= len(index)


def test_a_key_inserted_again_moves_and_is_counted_once() -> None:
    index, key = ReuseIndex(), os.urandom(32)
    index.insert(key, Position(0, 5))
    index.insert(key, Position(2, 9))
    assert index.lookup(key) == Position(2, 9) and len(index) == 1


def test_two_keys_of_one_prefix_never_serve_each_others_result() -> None:
    first, second = keyed(0x1234_5678_9ABC_DEF0), keyed(0x1234_5678_9ABC_DEF0)
    assert first != second
    stored = {Position(0, 1): first, Position(0, 2): second}  # what the cache topic holds there
    index = ReuseIndex()
    index.insert(first, Position(0, 1))
    index.insert(second, Position(0, 2))
    assert len(index) == 1  # the table takes a shared prefix for one key: the later replaces
    assert index.lookup(first) == Position(0, 2)  # a candidate only
    assert index.lookup_confirmed(first, stored.get) is None  # so first is recomputed, never wrong
    assert index.lookup_confirmed(second, stored.get) == Position(0, 2)
    assert index.lookup_confirmed(second, lambda position: None) is None  # an unreadable record


def test_keys_whose_prefix_is_a_marker_value_are_kept() -> None:
    index = ReuseIndex()
    zero, one, two = keyed(0), keyed(1), keyed(2)
    index.insert(zero, Position(0, 10))
    index.insert(one, Position(0, 11))
    assert index.lookup(zero) == Position(0, 10) and index.lookup(one) == Position(0, 11)
    asked = np.array([0, 1, 5], dtype=np.uint64)  # raw prefixes, markers among them
    assert [int(o) for o in index.lookup_many(asked)[1]] == [10, 11, -1]  # never an empty slot's zeros
    index.insert_many(np.array([1], dtype=np.uint64), np.array([3], dtype=np.int32), np.array([4], dtype=np.int64))
    assert index.lookup(one) == Position(3, 4) and len(index) == 2
    index.insert(two, Position(0, 12))  # zero is stored under prefix 2: they share it
    assert index.lookup(zero) == Position(0, 12) and len(index) == 2


def test_a_tombstone_removes_a_key_and_probes_still_pass_its_slot() -> None:
    index = ReuseIndex()
    # one home slot for all three (the same low bits), so they lie in one probe run
    a, b, c = keyed(5 | 1 << 40), keyed(5 | 2 << 40), keyed(5 | 3 << 40)
    for i, key in enumerate((a, b, c)):
        index.insert(key, Position(0, i))
    assert index.remove(b) and not index.remove(b)
    assert index.lookup(b) is None and len(index) == 2
    assert index.lookup(c) == Position(0, 2)  # found past b's deleted mark
    index.insert(b, Position(1, 7))
    assert index.lookup(b) == Position(1, 7) and index.lookup(c) == Position(0, 2) and len(index) == 3
    assert not ReuseIndex().remove(a)


def test_churn_through_tombstones_keeps_the_table_bounded() -> None:
    index = ReuseIndex()
    steady = [os.urandom(32) for _ in range(1_000)]
    for i, key in enumerate(steady):
        index.insert(key, Position(0, i))
    capacity = index.capacity
    for _ in range(50):
        passing = [os.urandom(32) for _ in range(500)]
        for key in passing:
            index.insert(key, Position(1, 0))
        for key in passing:
            index.remove(key)
    assert len(index) == 1_000 and index.capacity <= 2 * capacity
    assert all(index.lookup(key) == Position(0, i) for i, key in enumerate(steady))


def test_a_replay_gives_the_last_word_on_each_key() -> None:
    keys = [os.urandom(32) for _ in range(2_000)]
    entries: list[tuple[bytes, Position | None]] = [(k, Position(0, i)) for i, k in enumerate(keys)]
    entries += [(k, None) for k in keys[::4]]  # tombstones
    entries += [(k, Position(1, 5_000 + i)) for i, k in enumerate(keys[::8])]  # written again after
    entries += [(os.urandom(32), None)]  # a tombstone of a key never seen
    expected: dict[bytes, Position] = {}
    for key, position in entries:
        if position is None:
            expected.pop(key, None)
        else:
            expected[key] = position
    index = ReuseIndex.rebuild(iter(entries))
    assert len(index) == len(expected)
    assert all(index.lookup(key) == expected.get(key) for key in keys)


def test_a_replay_longer_than_one_batch_is_the_same_as_inserts_one_by_one() -> None:
    keys = [os.urandom(32) for _ in range(REPLAY_BATCH + 3_000)]
    entries: list[tuple[bytes, Position | None]] = [(k, Position(i % 7, i)) for i, k in enumerate(keys)]
    entries.append((keys[REPLAY_BATCH + 1], None))  # a tombstone in the second batch
    entries.append((keys[1], Position(6, 1)))  # a key of the first batch moved in the second
    replayed = ReuseIndex.rebuild(entries, expected=len(keys))
    one_by_one = ReuseIndex()
    for key, position in entries:
        if position is None:
            one_by_one.remove(key)
        else:
            one_by_one.insert(key, position)
    assert len(replayed) == len(one_by_one) == len(keys) - 1
    partitions, offsets = replayed.lookup_many(key_prefixes(keys))
    assert all(
        one_by_one.lookup(k) == (None if o < 0 else Position(int(p), int(o)))
        for k, p, o in zip(keys, partitions, offsets, strict=True)
    )
    assert offsets[REPLAY_BATCH + 1] == -1 and (partitions[1], offsets[1]) == (6, 1)


def test_batches_of_every_size_into_one_long_cluster_agree_with_a_dict() -> None:
    """Keys that all hash to three neighbouring slots make one cluster hundreds of slots long, so
    batches of every size (above and below reuse.index.SCALAR_BELOW) probe far in both the batch's
    numpy rounds and the one-by-one steps that finish it; tombstones leave marks to probe past and
    to fill again. Every key is where a plain dict says, by lookup and by lookup_many."""
    index = ReuseIndex(expected=1_000)
    capacity = index.capacity
    keys = [keyed(3 + i % 3 + capacity * (i + 1)) for i in range(700)]
    expected: dict[bytes, Position] = {}
    at, sizes, n = 0, [1, 7, 31, 32, 33, 100, 250], 0
    while at < len(keys):
        batch = keys[at : at + sizes[n % len(sizes)]]
        gone = keys[max(0, at - 40) : at : 9]  # some of the last batches' keys removed in this one
        asked = [*batch, *gone]
        offsets = np.array([at + j for j in range(len(batch))] + [-1] * len(gone), dtype=np.int64)
        index.insert_many(key_prefixes(asked), np.full(len(asked), n % 5, dtype=np.int32), offsets)
        expected.update({key: Position(n % 5, at + j) for j, key in enumerate(batch)})
        for key in gone:
            expected.pop(key, None)
        at, n = at + len(batch), n + 1
    assert index.capacity == capacity and len(index) == len(expected)  # one table: the cluster stays whole
    assert all(index.lookup(key) == expected.get(key) for key in keys)
    partitions, offsets = index.lookup_many(key_prefixes(keys))
    assert all(
        (int(p), int(o)) == expected.get(k, Position(-1, -1)) for k, p, o in zip(keys, partitions, offsets, strict=True)
    )


def test_lookup_many_answers_as_lookup_does() -> None:
    index = ReuseIndex()
    known = [os.urandom(32) for _ in range(300)]
    for i, key in enumerate(known):
        index.insert(key, Position(i % 2, i))
    asked = known + [os.urandom(32) for _ in range(300)]
    partitions, offsets = index.lookup_many(key_prefixes(asked))
    assert [int(o) for o in offsets] == list(range(300)) + [-1] * 300
    assert [int(p) for p in partitions[:300]] == [i % 2 for i in range(300)]
    assert len(index.lookup_many(np.zeros(0, dtype=np.uint64))[0]) == 0


def test_what_is_not_a_key_or_a_position_is_refused() -> None:
    index = ReuseIndex()
    with pytest.raises(ValueError, match="32 bytes"):
        index.lookup(b"short")
    with pytest.raises(ValueError, match="32 bytes"):
        key_prefixes([b"x" * 33])
    with pytest.raises(ValueError, match="at least 0"):
        index.insert(os.urandom(32), Position(0, -1))
    with pytest.raises(ValueError, match="at least 0"):
        index.insert(os.urandom(32), Position(-1, 0))
    assert len(index) == 0


def test_memory_is_twenty_bytes_a_slot_sized_for_what_is_expected() -> None:
    index = ReuseIndex(expected=1_000_000)
    assert index.capacity == 1 << 21 and index.nbytes == 20 << 21
