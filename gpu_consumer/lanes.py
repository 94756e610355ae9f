"""Which lane the next poll window comes from: the pure policy, no Kafka in here.

Live records are served first; while live traffic is continuous the bulk lane still keeps at
least `bulk_share` of the engine's *time* (seconds of inference, not records: a batch record and
a live record of one model may differ in length, and time is what the bulk lane is starved of).
Engine time is remembered with an exponential decay so the share is over the recent past: a
bulk lane that had the engine to itself for an hour does not bank credit against live traffic.
The poll loop (windows.py) pauses the lanes the policy did not choose, with kafka_io's primitives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kafka_io.topology import Lane

DEFAULT_BULK_SHARE = 0.1
# Engine seconds after which past service counts half: long enough to average over many windows,
# short enough that a burst of live traffic gets the engine within seconds of a quiet spell.
HALF_LIFE_S = 10.0


def check_bulk_share(share: float) -> float:
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"--bulk-share must be between 0 and 1 (a share of engine time), got {share}")
    return share


@dataclass(frozen=True)
class EngineTime:
    """Decayed engine seconds each lane got recently."""

    live_s: float = 0.0
    bulk_s: float = 0.0

    def served(self, lane: Lane, seconds: float, half_life_s: float = HALF_LIFE_S) -> EngineTime:
        """This record of service after `lane` had the engine for `seconds` more."""
        if seconds < 0:
            raise ValueError(f"engine seconds must be >= 0, got {seconds}")
        keep = 0.5 ** (seconds / half_life_s)
        live, bulk = self.live_s * keep, self.bulk_s * keep
        if lane == "live":
            live += seconds
        else:
            bulk += seconds
        return EngineTime(live, bulk)

    def bulk_share(self) -> float | None:
        total = self.live_s + self.bulk_s
        return None if total <= 0 else self.bulk_s / total


def next_lane(live_pending: bool, bulk_pending: bool, recent: EngineTime, bulk_share: float) -> Lane | None:
    """The lane the next window comes from, or None when neither has a record waiting."""
    if not (live_pending and bulk_pending):
        return "live" if live_pending else "bulk" if bulk_pending else None
    share = recent.bulk_share()
    # Both waiting: live first unless the bulk lane has fallen below its minimum share.
    if share is not None and bulk_share > 0 and share < bulk_share:
        return "bulk"
    return "live"


class LanePicker:
    """A worker's `pick` for windows.windows(): next_lane over the lanes with records, or
    None while `has_room(lane)` says no window of that lane can be taken now. Never the other lane
    instead: the place a bulk window the share guard asked for waits on would go to the next
    live window, over and over (a live window's extra place absorbs every freed one; the backfill
    got 3.9% of the engine at --bulk-share 0.1).

    `contended` says whether the last pick had both lanes waiting. Only such windows' engine time
    should count toward the share (EngineTime.served): a backfill that ran alone would otherwise
    bank credit against the next burst of live traffic, and at --bulk-share 0.1 got nothing for
    the first ~30 s of a flood of live records (10 s half-life).

    While a bulk window is queued and not started (`queued("bulk")`), live is picked: the engine
    time the policy sees is of windows already run, so without this every pick until that window
    ran would ask for batch again, and the share overshot (17% at --bulk-share 0.1)."""

    def __init__(
        self,
        bulk_share: float,
        recent: Callable[[], EngineTime],
        has_room: Callable[[str], bool] = lambda lane: True,
        queued: Callable[[str], int] = lambda lane: 0,
    ) -> None:
        self.bulk_share = check_bulk_share(bulk_share)  # serve()'s callers besides the CLI
        self._recent, self._has_room, self._queued = recent, has_room, queued
        self.contended = False

    def __call__(self, ready: list[str]) -> str | None:
        live, bulk = "live" in ready, "bulk" in ready
        self.contended = live and bulk
        lane = next_lane(live, bulk, self._recent(), self.bulk_share) or ready[0]
        if lane == "bulk" and live and self._queued("bulk"):
            lane = "live"
        return lane if self._has_room(lane) else None
