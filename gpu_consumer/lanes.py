"""Which lane the next poll window comes from (#35): the pure policy, no Kafka in here.

Live records are served first; while live traffic is continuous the batch lane still keeps at
least `batch_share` of the engine's *time* (seconds of inference, not records: a batch record and
a live record of one model may differ in length, and time is what the batch lane is starved of).
Engine time is remembered with an exponential decay so the share is over the recent past: a
batch lane that had the engine to itself for an hour does not bank credit against live traffic.
The Kafka edge (kafka_io/polling.py) only pauses/resumes the lane the policy did not choose.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_io.settings import Priority

DEFAULT_BATCH_SHARE = 0.1
# Engine seconds after which past service counts half: long enough to average over many windows,
# short enough that a burst of live traffic gets the engine within seconds of a quiet spell.
HALF_LIFE_S = 10.0


def check_batch_share(share: float) -> float:
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"--batch-share must be between 0 and 1 (a share of engine time), got {share}")
    return share


@dataclass(frozen=True)
class EngineTime:
    """Decayed engine seconds each lane got recently."""

    live_s: float = 0.0
    batch_s: float = 0.0

    def served(self, lane: Priority, seconds: float, half_life_s: float = HALF_LIFE_S) -> EngineTime:
        """This record of service after `lane` had the engine for `seconds` more."""
        if seconds < 0:
            raise ValueError(f"engine seconds must be >= 0, got {seconds}")
        keep = 0.5 ** (seconds / half_life_s)
        live, batch = self.live_s * keep, self.batch_s * keep
        if lane == "live":
            live += seconds
        else:
            batch += seconds
        return EngineTime(live, batch)

    def batch_share(self) -> float | None:
        total = self.live_s + self.batch_s
        return None if total <= 0 else self.batch_s / total


def next_lane(live_pending: bool, batch_pending: bool, recent: EngineTime, batch_share: float) -> Priority | None:
    """The lane the next window comes from, or None when neither has a record waiting."""
    if not (live_pending and batch_pending):
        return "live" if live_pending else "batch" if batch_pending else None
    share = recent.batch_share()
    # Both waiting: live first unless the batch lane has fallen below its minimum share.
    if share is not None and batch_share > 0 and share < batch_share:
        return "batch"
    return "live"
