"""What `profile` and `report` read of a job's results: each record's stage timestamps and batch,
kept as columns while the results are read (results/outcome.py, keep_timings)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable

import numpy as np

from schemas import InferenceResult

# (name, from timestamp, to timestamp): consecutive, so they add up to end to end.
STAGES = (
    ("wait for preprocess", "submitted", "preprocess_start"),
    ("preprocess", "preprocess_start", "preprocess_end"),
    ("wait for inference", "preprocess_end", "batch_formed"),
    ("batching", "batch_formed", "inference_start"),
    ("inference", "inference_start", "inference_end"),
    ("postprocess", "inference_end", "result_produced"),
)
STAMPS = tuple(dict.fromkeys(k for _, a, b in STAGES for k in (a, b)))  # in stage order
MISSING = -1  # a stamp the result does not carry


class Timings:
    """What `profile` and `report` need of each result, as columns: about 100 B a record instead
    of the ~3.5 KB of a decoded result, so a report over millions of records fits in memory. A
    record put again (a newer model version) replaces its row."""

    def __init__(self) -> None:
        self._stamps = array("q")  # len(STAMPS) a record, MISSING where absent
        self._ints = array("q")  # batch number, batch size, length, padded length
        self._rows: dict[str, int] = {}
        self._batches: dict[str, int] = {}

    @classmethod
    def of(cls, results: Iterable[InferenceResult]) -> Timings:
        timings = cls()
        for result in results:
            timings.put(result)
        return timings

    def put(self, result: InferenceResult) -> None:
        stamps = [result.timestamps.get(k, MISSING) for k in STAMPS]
        batch = self._batches.setdefault(result.batch_id, len(self._batches))
        ints = [batch, result.batch_size, result.length, result.padded_length]
        row = self._rows.get(result.record_id)
        if row is None:
            self._rows[result.record_id] = len(self._rows)
            self._stamps.extend(stamps)
            self._ints.extend(ints)
        else:
            self._stamps[row * len(STAMPS) : (row + 1) * len(STAMPS)] = array("q", stamps)
            self._ints[row * 4 : (row + 1) * 4] = array("q", ints)

    def __len__(self) -> int:
        return len(self._rows)

    def stamps(self) -> dict[str, np.ndarray]:
        """Each stamp's column (MISSING where a record lacks it)."""
        table = np.frombuffer(self._stamps, dtype=np.int64).copy().reshape(-1, len(STAMPS)) if self._rows else None
        return {k: (table[:, i] if table is not None else np.empty(0, np.int64)) for i, k in enumerate(STAMPS)}

    def timed(self) -> np.ndarray:
        """A mask of the records that carry every stamp."""
        return np.all(np.stack(list(self.stamps().values())) != MISSING, axis=0)

    def ints(self) -> np.ndarray:
        """Columns batch number, batch size, length, padded length; one row a record."""
        if not self._rows:
            return np.empty((0, 4), np.int64)
        return np.frombuffer(self._ints, dtype=np.int64).copy().reshape(-1, 4)
