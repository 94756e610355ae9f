"""Where each reusable result lives: a reuse key (32 bytes) to its record's position (partition and
offset) in the model's compacted results-cache topic, in bounded memory for tens of millions of keys.

The design: an open-addressing hash table (linear probing) in one numpy array of packed slots:
the key's first 8 bytes (the prefix), the offset (int64) and the partition (int32): 20 bytes a
slot. The table grows when it is three quarters full, so it holds 27 to 60 bytes a key: 10M keys
in 2^24 slots are 335 MB (2^25 slots, 671 MB, hold up to 25M), a fraction of the cache topic they
point into (10M MiniLM embeddings are about 16 GB of records). What was not chosen:
- a dict of 32-byte keys: about 150 bytes a key in CPython, 1.5 GB for 10M;
- the full keys in the table: 44 bytes a slot, more than twice this one;
- sorted runs on disk behind a Bloom filter (about 1.2 bytes a key in memory at 1% false
  positives): far less memory, but a log-structured store of its own to merge and compact, and
  a disk read for every hit; a larger index than this one is a case for it, or for backing these
  same table by a file (numpy.memmap).

The prefix is not the key. BLAKE2b's output is uniform, so two of n keys share a prefix with
probability about n^2 / 2^65 (3e-6 for 10M keys), and the table treats a shared prefix as the same
key: a later insert replaces the earlier key's position. So a position from `lookup` is a candidate:
the caller reads the record there and serves it only if its full key is the one asked for
(`lookup_confirmed`). A collision costs a recomputed result, never a wrong one.

A key is removed by a tombstone (the compacted topic's null value), which leaves a deleted mark in
its slot so that probes continue past it; marks are cleared when the table is rebuilt to grow.
`rebuild` replays (key, position or None) pairs in topic order, the last word on a key winning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

KEY_SIZE = 32
# Prefix values that mark a slot rather than hold a key; a key whose prefix is one of them is
# stored as if its prefix were 2 or 3 (a prefix shared with other keys, which the confirm settles).
EMPTY, DELETED = 0, 1
MAX_LOAD = 0.75
MIN_CAPACITY = 16
# A batch's probes advance together, one numpy round a step, until this few are left; those few go
# on one by one. Linear probing near MAX_LOAD leaves a few keys 20 or 30 slots from home, so a
# batch of a hundred took some 25 rounds of a dozen numpy calls each, 80% of a tail's put_many
# (bench.reuse_index: the store fed in batches of 120).
SCALAR_BELOW = 32
# rebuild's batch: large enough that numpy's per-call cost is spread thin, small enough to stay a
# few MB beside the table
REPLAY_BATCH = 65_536

SLOT = np.dtype([("prefix", "<u8"), ("offset", "<i8"), ("partition", "<i4")])  # packed: 20 bytes
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]


class Position(NamedTuple):
    """Where a cached result is: its record's partition and offset in the cache topic."""

    partition: int
    offset: int


def key_prefix(key: bytes) -> int:
    """The table's word for a key: its first 8 bytes, moved off the two marker values."""
    if len(key) != KEY_SIZE:
        raise ValueError(f"a reuse key is {KEY_SIZE} bytes, got {len(key)}")
    prefix = int.from_bytes(key[:8], "little")
    return prefix + 2 if prefix <= DELETED else prefix


def key_prefixes(keys: Iterable[bytes]) -> U64:
    """key_prefix of each key, as one array."""
    joined = b"".join(keys)
    if len(joined) % KEY_SIZE:
        raise ValueError(f"reuse keys are {KEY_SIZE} bytes each")
    return off_markers(np.frombuffer(joined, dtype="<u8").reshape(-1, KEY_SIZE // 8)[:, 0].astype(np.uint64))


def off_markers(prefixes: U64) -> U64:
    """Prefixes with the two marker values moved off, as key_prefix does (a new array if any moved)."""
    moved = prefixes <= DELETED
    return np.where(moved, prefixes + np.uint64(2), prefixes) if moved.any() else prefixes


def capacity_for(keys: int) -> int:
    """The smallest table (a power of two) that holds `keys` under MAX_LOAD."""
    capacity = MIN_CAPACITY
    while keys > capacity * MAX_LOAD:
        capacity *= 2
    return capacity


class ReuseIndex:
    """Reuse keys to positions (module docstring): insert, lookup, remove, and their batch forms."""

    def __init__(self, expected: int = 0) -> None:
        self._allocate(capacity_for(expected))

    def _allocate(self, capacity: int) -> None:
        # one 20-byte record a slot, its fields side by side: a hit reads one or two cache lines
        self._table = np.zeros(capacity, dtype=SLOT)
        self.prefixes: U64 = self._table["prefix"]
        self.partitions: I32 = self._table["partition"]
        self.offsets: I64 = self._table["offset"]
        self._mask = capacity - 1
        self._live = 0
        self._deleted = 0

    def __len__(self) -> int:
        return self._live

    @property
    def capacity(self) -> int:
        return len(self.prefixes)

    @property
    def nbytes(self) -> int:
        return self._table.nbytes

    def insert(self, key: bytes, position: Position) -> None:
        """Record where `key`'s result is; a later insert of the key (or of its prefix) replaces it."""
        if not 0 <= position.partition < 2**31 or not 0 <= position.offset < 2**63:
            raise ValueError(f"a position is a partition and an offset of at least 0, got {position}")
        prefix = key_prefix(key)
        slot = self._slot(prefix)
        if slot < 0:
            if self._live + self._deleted + 1 > self.capacity * MAX_LOAD:
                self._grow(self._live + 1)
            slot = prefix & self._mask
            while self.prefixes[slot] > DELETED:
                slot = (slot + 1) & self._mask
            self._deleted -= int(self.prefixes[slot] == DELETED)
            self._live += 1
            self.prefixes[slot] = prefix
        self.partitions[slot] = position.partition
        self.offsets[slot] = position.offset

    def remove(self, key: bytes) -> bool:
        """Forget `key` (a tombstone); False if it was not there."""
        slot = self._slot(key_prefix(key))
        if slot < 0:
            return False
        self.prefixes[slot] = DELETED
        self._live -= 1
        self._deleted += 1
        return True

    def lookup(self, key: bytes) -> Position | None:
        """Where `key`'s result may be: a candidate whose record's full key must be compared (the
        prefix is not the key), or None when no key of this prefix is known."""
        slot = self._slot(key_prefix(key))
        return None if slot < 0 else Position(int(self.partitions[slot]), int(self.offsets[slot]))

    def lookup_confirmed(self, key: bytes, stored_key: Callable[[Position], bytes | None]) -> Position | None:
        """lookup, confirmed: the position only if `stored_key` (the key of the record there, None if
        it cannot be read) is `key`."""
        position = self.lookup(key)
        return position if position is not None and stored_key(position) == key else None

    def _slot(self, prefix: int) -> int:
        return self._slot_from(prefix, prefix & self._mask)

    def _slot_from(self, prefix: int, slot: int) -> int:
        """The slot holding `prefix`, probing from `slot` on; -1 if an empty slot comes first."""
        prefixes, mask = self.prefixes, self._mask
        while True:
            found = int(prefixes[slot])
            if found == prefix:
                return slot
            if found == EMPTY:
                return -1
            slot = (slot + 1) & mask

    def lookup_many(self, prefixes: U64) -> tuple[I32, I64]:
        """lookup for many keys at once (key_prefixes): partitions and offsets, -1 where unknown."""
        prefixes = off_markers(prefixes)
        slots = self._slots(prefixes)
        found = slots >= 0
        partitions = np.full(len(prefixes), -1, dtype=np.int32)
        offsets = np.full(len(prefixes), -1, dtype=np.int64)
        partitions[found] = self.partitions[slots[found]]
        offsets[found] = self.offsets[slots[found]]
        return partitions, offsets

    def _slots(self, prefixes: U64) -> I64:
        """The slot holding each prefix, -1 where none does: all probes advance together, one step
        a round, until each meets its prefix or an empty slot."""
        result = np.full(len(prefixes), -1, dtype=np.int64)
        pending = np.arange(len(prefixes))
        slots = (prefixes & np.uint64(self._mask)).astype(np.int64)
        while len(pending) >= SCALAR_BELOW:
            held = self.prefixes[slots]
            hit = held == prefixes[pending]
            result[pending[hit]] = slots[hit]
            going = ~hit & (held != EMPTY)
            pending, slots = pending[going], (slots[going] + 1) & self._mask
        for i, slot in zip(pending.tolist(), slots.tolist(), strict=True):
            result[i] = self._slot_from(int(prefixes[i]), slot)
        return result

    def insert_many(self, prefixes: U64, partitions: I32, offsets: I64) -> None:
        """Apply entries in order: an offset of -1 removes its key (a tombstone), any other records
        the position; of several entries for one key the last wins."""
        prefixes = off_markers(prefixes)
        last = len(prefixes) - 1 - np.unique(prefixes[::-1], return_index=True)[1]
        prefixes, partitions, offsets = prefixes[last], partitions[last], offsets[last]
        slots = self._slots(prefixes)
        known, removed = slots >= 0, offsets < 0
        update = known & ~removed
        self.partitions[slots[update]] = partitions[update]
        self.offsets[slots[update]] = offsets[update]
        gone = slots[known & removed]
        self.prefixes[gone] = DELETED
        self._live -= len(gone)
        self._deleted += len(gone)
        new = ~known & ~removed
        if self._live + self._deleted + int(new.sum()) > self.capacity * MAX_LOAD:
            self._grow(self._live + int(new.sum()))
        self._place(prefixes[new], partitions[new], offsets[new])

    def _grow(self, keys: int) -> None:
        """Rehash the live keys into a table that holds `keys` and an eighth more (deleted marks are
        dropped), so that a table rehashed at its own size is not rehashed again a few inserts on."""
        live = self.prefixes > DELETED
        prefixes, partitions, offsets = self.prefixes[live], self.partitions[live], self.offsets[live]
        self._allocate(capacity_for(keys + keys // 8))
        self._place(prefixes, partitions, offsets)

    def _place(self, prefixes: U64, partitions: I32, offsets: I64) -> None:
        """Put keys the table lacks into free slots (empty or deleted), all probing together: where
        several want one free slot the first takes it and the rest probe on."""
        pending = np.arange(len(prefixes))
        slots = (prefixes & np.uint64(self._mask)).astype(np.int64)
        while len(pending) >= SCALAR_BELOW:
            held = self.prefixes[slots]
            free = np.flatnonzero(held <= DELETED)
            take = np.zeros(len(pending), dtype=bool)
            take[free[np.unique(slots[free], return_index=True)[1]]] = True
            chosen, at = pending[take], slots[take]
            self._deleted -= int((held[take] == DELETED).sum())
            self.prefixes[at] = prefixes[chosen]
            self.partitions[at] = partitions[chosen]
            self.offsets[at] = offsets[chosen]
            self._live += len(chosen)
            pending, slots = pending[~take], (slots[~take] + 1) & self._mask
        table, mask = self.prefixes, self._mask
        for i, slot in zip(pending.tolist(), slots.tolist(), strict=True):
            while table[slot] > DELETED:
                slot = (slot + 1) & mask
            self._deleted -= int(table[slot] == DELETED)
            table[slot] = prefixes[i]
            self.partitions[slot] = partitions[i]
            self.offsets[slot] = offsets[i]
            self._live += 1

    @classmethod
    def rebuild(cls, entries: Iterable[tuple[bytes, Position | None]], expected: int = 0) -> ReuseIndex:
        """The index a compacted topic's replay gives: (key, position) pairs in offset order, None
        for a tombstone; sized for `expected` keys up front to spare the doublings."""
        index = cls(expected)
        batch: list[tuple[bytes, Position | None]] = []
        for entry in entries:
            batch.append(entry)
            if len(batch) == REPLAY_BATCH:
                index._replay(batch)
                batch = []
        index._replay(batch)
        return index

    def _replay(self, batch: list[tuple[bytes, Position | None]]) -> None:
        if batch:
            gone = Position(-1, -1)
            positions = [gone if p is None else p for _, p in batch]
            self.insert_many(key_prefixes(k for k, _ in batch), *_position_arrays(positions))


def _position_arrays(positions: list[Position]) -> tuple[I32, I64]:
    partitions = np.array([p.partition for p in positions], dtype=np.int64)
    offsets = np.array([p.offset for p in positions], dtype=np.int64)
    if len(positions) and (partitions.min() < -1 or partitions.max() >= 2**31 or offsets.min() < -1):
        raise ValueError("a position is a partition below 2^31 and an offset of at least 0")
    return partitions.astype(np.int32), offsets
