"""The lane policy alone (gpu_consumer/lanes.py): live first, the batch share over a simulated
sequence of windows, empty lanes."""

from __future__ import annotations

import pytest

from gpu_consumer.lanes import EngineTime, check_batch_share, next_lane
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
    with pytest.raises(ValueError, match="engine seconds"):
        EngineTime().served("live", -1.0)
