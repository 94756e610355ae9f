"""The commit rule of the pipelined GPU worker, as a pure, thread-safe ledger of windows in flight.

A window's offsets may be committed once every output of that window, and of every window polled
before it, is confirmed by the broker. Windows finish in any order (deliveries confirm out of
order across partitions), so offsets move only over the longest confirmed prefix:

    open(w1) open(w2) open(w3)      # in poll order, with each window's next offsets
    ... w2 confirmed, w1 not        # nothing to commit: w1's records could still be lost
    ... w1 confirmed                # commit max(w1, w2) per partition; w3 stays in flight

Each window keeps its outputs until confirmed, so after a failed delivery they can be produced
again by a new producer (at-least-once; results are keyed, readers drop duplicates).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kafka_io.records import TP, OutRecord


@dataclass(eq=False)
class Entry:
    """One window in flight."""

    offsets: dict[TP, int]  # per partition, the offset after the window's last record
    records: int
    outputs: list[OutRecord] = field(default_factory=list)
    confirmed: int = 0
    sealed_at: float | None = None  # every output handed to the producer
    generation: int = 0  # the consumer's group generation it was polled in (kafka_io/incarnation.py)

    @property
    def done(self) -> bool:
        return self.sealed_at is not None and self.confirmed >= len(self.outputs)


class Ledger:
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._entries: deque[Entry] = deque()
        self.failure: str | None = None

    def open(self, offsets: dict[TP, int], records: int, generation: int = 0) -> Entry:
        entry = Entry(offsets, records, generation=generation)
        with self._lock:
            self._entries.append(entry)
        return entry

    def sent(self, entry: Entry, outputs: Iterable[OutRecord]) -> None:
        with self._lock:
            entry.outputs.extend(outputs)

    def seal(self, entry: Entry) -> None:
        with self._lock:
            entry.sealed_at = time.monotonic()
            self._lock.notify_all()

    def confirm(self, entry: Entry, n: int = 1) -> None:
        """Called once per delivery report, only on the thread that polls the producer: the one
        writer of `confirmed`, so the count needs no lock (a lock per record shows in profiles)."""
        entry.confirmed += n
        if entry.done:
            with self._lock:
                self._lock.notify_all()

    def fail(self, reason: str) -> None:
        with self._lock:
            self.failure = self.failure or reason
            self._lock.notify_all()

    def take_committable(self, stale_through: int = -1) -> tuple[dict[TP, int], int]:
        """The offsets to commit for the confirmed prefix (removed from the ledger), and its records.
        Windows polled in a generation up to `stale_through` leave without their offsets: they were
        read at positions of a broker that lost its logs (kafka_io/incarnation.py)."""
        offsets: dict[TP, int] = {}
        records = 0
        with self._lock:
            while self._entries and self._entries[0].done:
                entry = self._entries.popleft()
                if entry.generation <= stale_through:
                    continue
                records += entry.records
                for tp, offset in entry.offsets.items():
                    offsets[tp] = max(offsets.get(tp, -1), offset)
        return offsets, records

    def in_flight(self) -> int:
        with self._lock:
            return len(self._entries)

    def unconfirmed(self) -> list[Entry]:
        with self._lock:
            return [e for e in self._entries if not e.done]

    def stalled(self, timeout_s: float) -> bool:
        """A sealed window unconfirmed for timeout_s: deliveries normally confirm in milliseconds."""
        now = time.monotonic()
        with self._lock:
            return any(e.sealed_at is not None and not e.done and now - e.sealed_at > timeout_s for e in self._entries)

    def wait(self, timeout_s: float) -> None:
        """Sleep until the oldest window is done (a commit can move) or one failed, at most
        timeout_s. The condition is checked under the lock, so a window finished just before the
        call is not waited out."""
        with self._lock:
            self._lock.wait_for(
                lambda: self.failure is not None or not self._entries or self._entries[0].done, timeout_s
            )

    def resolve(self, entries: Iterable[Entry], seal: bool = True) -> None:
        """Count `entries` as confirmed: their outputs were produced again and confirmed. seal=False:
        an entry not sealed yet stays open for the outputs still to come (a generation window
        whose sequences are decoding)."""
        with self._lock:
            for entry in entries:
                entry.confirmed = len(entry.outputs)
                if entry.sealed_at is None and seal:
                    entry.sealed_at = time.monotonic()
            self.failure = None
            self._lock.notify_all()
