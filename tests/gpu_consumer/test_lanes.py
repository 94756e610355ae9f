"""The lane policy alone (gpu_consumer/lanes.py): live first, the batch share over a simulated
sequence of windows, empty lanes."""

from __future__ import annotations

import pytest

from gpu_consumer.lanes import EngineTime, LanePicker, check_batch_share, next_lane
from kafka_io.settings import Priority


def test_live_first_when_both_wait_and_nothing_served_yet() -> None:
    assert next_lane(True, True, EngineTime(), 0.1) == "live"


def test_empty_lanes() -> None:
    assert next_lane(False, False, EngineTime(), 0.1) is None
    assert next_lane(False, True, EngineTime(live_s=100.0), 0.0) == "batch"
    assert next_lane(True, False, EngineTime(batch_s=100.0), 1.0) == "live"


def simulate(batch_share: float, windows: int, live_s: float, batch_s: float) -> tuple[list[Priority], EngineTime]:
    """Both lanes always have records (continuous live traffic, a batch backlog)."""
    recent, order = EngineTime(), []
    for _ in range(windows):
        lane = next_lane(True, True, recent, batch_share)
        assert lane is not None
        order.append(lane)
        recent = recent.served(lane, live_s if lane == "live" else batch_s)
    return order, recent


@pytest.mark.parametrize("share", [0.05, 0.1, 0.3, 0.5])
@pytest.mark.parametrize(("live_s", "batch_s"), [(0.01, 0.01), (0.005, 0.04), (0.04, 0.005)])
def test_batch_share_of_engine_time_is_honoured(share: float, live_s: float, batch_s: float) -> None:
    order, recent = simulate(share, 5000, live_s, batch_s)
    got = recent.batch_share()
    assert got is not None
    # The share to within one window (the policy's granularity): the batch lane gets a window
    # whenever it falls below its share, and only then.
    one_window = max(live_s, batch_s) / (recent.live_s + recent.batch_s)
    assert share - one_window <= got <= share + one_window
    assert order[0] == "live"
    assert "batch" in order[:50]


def test_zero_share_starves_batch_only_while_live_waits() -> None:
    order, _ = simulate(0.0, 1000, 0.01, 0.01)
    assert set(order) == {"live"}
    assert next_lane(False, True, EngineTime(live_s=5.0), 0.0) == "batch"


def test_old_service_decays() -> None:
    recent = EngineTime(batch_s=3600.0)
    for _ in range(200):
        recent = recent.served("live", 1.0)
    share = recent.batch_share()
    assert share is not None and share < 0.1
    assert next_lane(True, True, recent, 0.1) == "batch"


@pytest.mark.parametrize("bad", [-0.01, 1.5])
def test_batch_share_is_validated(bad: float) -> None:
    with pytest.raises(ValueError, match="--batch-share must be between 0 and 1"):
        check_batch_share(bad)
    with pytest.raises(ValueError, match="--batch-share must be between 0 and 1"):
        LanePicker(bad, EngineTime)  # serve(batch_share=...) from Python, not only the CLI
    with pytest.raises(ValueError, match="engine seconds"):
        EngineTime().served("live", -1.0)


def test_the_picker_waits_for_room_for_its_lane_and_never_hands_the_place_to_the_other() -> None:
    """With the batch lane below its share and room only for a live window (the live lane's extra
    place), the picker waits: giving that place to live over and over starved the backfill."""
    behind = EngineTime(live_s=10.0, batch_s=0.1)
    picker = LanePicker(0.1, lambda: behind, has_room=lambda lane: lane == "live")
    assert picker(["batch", "live"]) is None and picker.contended
    picker = LanePicker(0.1, lambda: behind, has_room=lambda lane: True)
    assert picker(["batch", "live"]) == "batch"
    assert picker(["live"]) == "live" and not picker.contended
    assert LanePicker(0.1, EngineTime)([""]) == ""  # no lanes: the one there is


def test_only_contended_windows_count_toward_the_share() -> None:
    """The worker charges engine time only for windows picked while both lanes waited: a backfill
    that ran alone for a minute does not keep a flood of live records from yielding it its share."""

    def flood(recent: EngineTime) -> list[str]:
        """40 one-second windows with both lanes waiting, each charged to its lane."""
        picker, order = LanePicker(0.1, lambda: recent), []
        for _ in range(40):
            lane = picker(["batch", "live"])
            assert lane is not None and picker.contended
            order.append(lane)
            recent = recent.served("live" if lane == "live" else "batch", 1.0)
        return order

    alone = LanePicker(0.1, EngineTime)
    assert alone(["batch"]) == "batch" and not alone.contended  # the worker charges nothing for these
    order = flood(EngineTime())
    assert order[:2] == ["live", "batch"] and abs(order.count("batch") - 4) <= 1
    banked = EngineTime()
    for _ in range(60):  # what charging the backfill's minute alone would have done
        banked = banked.served("batch", 1.0)
    assert "batch" not in flood(banked)[:30]


def test_a_batch_window_on_its_way_is_not_asked_for_again() -> None:
    """The engine time seen is of windows already run: while the guard's batch window waits for
    the engine, asking for batch again at every pick overshot the share (17% at 0.1)."""
    behind = EngineTime(live_s=10.0)
    waiting = {"batch": 1}
    picker = LanePicker(0.1, lambda: behind, queued=lambda lane: waiting.get(lane, 0))
    assert picker(["batch", "live"]) == "live"
    waiting["batch"] = 0  # it started
    assert picker(["batch", "live"]) == "batch"
    waiting["batch"] = 1
    assert picker(["batch"]) == "batch"  # alone, a backfill queues as many windows as there is room for
