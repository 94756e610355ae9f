"""The lane policy alone (gpu_consumer/lanes.py): live first, the batch share over a simulated
sequence of windows, empty lanes."""

from __future__ import annotations

import pytest

from gpu_consumer.lanes import EngineTime, LanePicker, check_bulk_share, next_lane
from kafka_io.topology import Lane


def test_live_first_when_both_wait_and_nothing_served_yet() -> None:
    assert next_lane(True, True, EngineTime(), 0.1) == "live"


def test_empty_lanes() -> None:
    assert next_lane(False, False, EngineTime(), 0.1) is None
    assert next_lane(False, True, EngineTime(live_s=100.0), 0.0) == "bulk"
    assert next_lane(True, False, EngineTime(bulk_s=100.0), 1.0) == "live"


def simulate(bulk_share: float, windows: int, live_s: float, bulk_s: float) -> tuple[list[Lane], EngineTime]:
    """Both lanes always have records (continuous live traffic, a batch backlog)."""
    recent, order = EngineTime(), []
    for _ in range(windows):
        lane = next_lane(True, True, recent, bulk_share)
        assert lane is not None
        order.append(lane)
        recent = recent.served(lane, live_s if lane == "live" else bulk_s)
    return order, recent


@pytest.mark.parametrize("share", [0.05, 0.1, 0.3, 0.5])
@pytest.mark.parametrize(("live_s", "bulk_s"), [(0.01, 0.01), (0.005, 0.04), (0.04, 0.005)])
def test_bulk_share_of_engine_time_is_honoured(share: float, live_s: float, bulk_s: float) -> None:
    order, recent = simulate(share, 5000, live_s, bulk_s)
    got = recent.bulk_share()
    assert got is not None
    # The share to within one window (the policy's granularity): the bulk lane gets a window
    # whenever it falls below its share, and only then.
    one_window = max(live_s, bulk_s) / (recent.live_s + recent.bulk_s)
    assert share - one_window <= got <= share + one_window
    assert order[0] == "live"
    assert "bulk" in order[:50]


def test_zero_share_starves_batch_only_while_live_waits() -> None:
    order, _ = simulate(0.0, 1000, 0.01, 0.01)
    assert set(order) == {"live"}
    assert next_lane(False, True, EngineTime(live_s=5.0), 0.0) == "bulk"


def test_old_service_decays() -> None:
    recent = EngineTime(bulk_s=3600.0)
    for _ in range(200):
        recent = recent.served("live", 1.0)
    share = recent.bulk_share()
    assert share is not None and share < 0.1
    assert next_lane(True, True, recent, 0.1) == "bulk"


@pytest.mark.parametrize("bad", [-0.01, 1.5])
def test_bulk_share_is_validated(bad: float) -> None:
    with pytest.raises(ValueError, match="--bulk-share must be between 0 and 1"):
        check_bulk_share(bad)
    with pytest.raises(ValueError, match="--bulk-share must be between 0 and 1"):
        LanePicker(bad, EngineTime)  # serve(bulk_share=...) from Python, not only the CLI
    with pytest.raises(ValueError, match="engine seconds"):
        EngineTime().served("live", -1.0)


def test_the_picker_waits_for_room_for_its_lane_and_never_hands_the_place_to_the_other() -> None:
    """With the bulk lane below its share and room only for a live window (the live lane's extra
    place), the picker waits: giving that place to live over and over starved the backfill."""
    behind = EngineTime(live_s=10.0, bulk_s=0.1)
    picker = LanePicker(0.1, lambda: behind, has_room=lambda lane: lane == "live")
    assert picker(["bulk", "live"]) is None and picker.contended
    picker = LanePicker(0.1, lambda: behind, has_room=lambda lane: True)
    assert picker(["bulk", "live"]) == "bulk"
    assert picker(["live"]) == "live" and not picker.contended
    assert LanePicker(0.1, EngineTime)([""]) == ""  # no lanes: the one there is


def test_only_contended_windows_count_toward_the_share() -> None:
    """The worker charges engine time only for windows picked while both lanes waited: a backfill
    that ran alone for a minute does not keep a flood of live records from yielding it its share."""

    def flood(recent: EngineTime) -> list[str]:
        """40 one-second windows with both lanes waiting, each charged to its lane."""
        picker, order = LanePicker(0.1, lambda: recent), []
        for _ in range(40):
            lane = picker(["bulk", "live"])
            assert lane is not None and picker.contended
            order.append(lane)
            recent = recent.served("live" if lane == "live" else "bulk", 1.0)
        return order

    alone = LanePicker(0.1, EngineTime)
    assert alone(["bulk"]) == "bulk" and not alone.contended  # the worker charges nothing for these
    order = flood(EngineTime())
    assert order[:2] == ["live", "bulk"] and abs(order.count("bulk") - 4) <= 1
    banked = EngineTime()
    for _ in range(60):  # what charging the backfill's minute alone would have done
        banked = banked.served("bulk", 1.0)
    assert "bulk" not in flood(banked)[:30]


def test_a_batch_window_on_its_way_is_not_asked_for_again() -> None:
    """The engine time seen is of windows already run: while the guard's bulk window waits for
    the engine, asking for batch again at every pick overshot the share (17% at 0.1)."""
    behind = EngineTime(live_s=10.0)
    waiting = {"bulk": 1}
    picker = LanePicker(0.1, lambda: behind, queued=lambda lane: waiting.get(lane, 0))
    assert picker(["bulk", "live"]) == "live"
    waiting["bulk"] = 0  # it started
    assert picker(["bulk", "live"]) == "bulk"
    waiting["bulk"] = 1
    assert picker(["bulk"]) == "bulk"  # alone, a backfill queues as many windows as there is room for
