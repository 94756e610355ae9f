"""Tick planning, without a broker: when ticks fall and which run after downtime (injected times)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.scheduling.cron import ScheduleSpecError, check_spec, next_tick, plan_ticks, tick_job_id, ticks_after

T0 = datetime(2026, 11, 29, 10, 0, 30, tzinfo=UTC)  # half a minute past a per-minute tick
GRACE = timedelta(seconds=30)


def minute(m: int) -> datetime:
    return datetime(2026, 11, 29, 10, m, tzinfo=UTC)


def test_an_on_time_tick_runs_under_either_policy() -> None:
    for misfire in ("skip", "catch-up"):
        plan = plan_ticks("* * * * *", "UTC", misfire, T0, minute(1) + timedelta(seconds=2), GRACE)
        assert plan.run == [minute(1)]
        assert plan.skipped == 0


def test_nothing_is_due_before_the_next_tick() -> None:
    plan = plan_ticks("* * * * *", "UTC", "catch-up", T0, minute(0) + timedelta(seconds=59), GRACE)
    assert plan.run == [] and plan.skipped == 0


def test_after_downtime_skip_drops_missed_ticks_and_catch_up_runs_them_oldest_first() -> None:
    back_at = minute(4) + timedelta(seconds=10)  # down from 10:00:30 to 10:04:10
    skip = plan_ticks("* * * * *", "UTC", "skip", T0, back_at, GRACE)
    assert skip.run == [minute(4)]  # 10 s late: on time
    assert (skip.skipped, skip.first_skipped, skip.last_skipped) == (3, minute(1), minute(3))
    catch_up = plan_ticks("* * * * *", "UTC", "catch-up", T0, back_at, GRACE)
    assert catch_up.run == [minute(1), minute(2), minute(3), minute(4)]
    assert catch_up.skipped == 0


def test_catch_up_is_capped_to_the_newest_missed_ticks() -> None:
    plan = plan_ticks("* * * * *", "UTC", "catch-up", T0, minute(10) + timedelta(seconds=45), GRACE, max_catch_up=3)
    assert plan.run == [minute(8), minute(9), minute(10)]
    assert (plan.skipped, plan.first_skipped, plan.last_skipped) == (7, minute(1), minute(7))


def test_cron_is_read_in_the_schedules_time_zone_across_dst() -> None:
    # 03:00 in Berlin is 02:00 UTC before the October change and 01:00 UTC in summer
    before = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)
    assert next_tick("0 3 * * *", "Europe/Berlin", before) == datetime(2026, 10, 25, 2, 0, tzinfo=UTC)
    summer = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    assert next_tick("0 3 * * *", "Europe/Berlin", summer) == datetime(2026, 7, 2, 1, 0, tzinfo=UTC)
    # 02:30 on 29 March does not exist in Berlin: it runs at 03:30 CEST, one hour after 01:30 CET
    spring = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
    assert next_tick("30 2 * * *", "Europe/Berlin", spring) == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    # 02:30 on 25 October happens twice: it runs once, at the first (CEST, 00:30 UTC)
    autumn = ticks_after("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 24, 12, 0, tzinfo=UTC))
    assert [next(autumn), next(autumn)] == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC),
    ]


def test_the_job_id_of_a_tick_is_the_same_wherever_it_is_computed() -> None:
    berlin_view = minute(5).astimezone(next_tick("0 3 * * *", "Europe/Berlin", T0).tzinfo)
    assert tick_job_id("nightly", minute(5)) == tick_job_id("nightly", berlin_view) == "nightly-20261129T1005Z"


@pytest.mark.parametrize(
    ("cron", "tz", "misfire", "message"),
    [
        ("61 * * * *", "UTC", "skip", "out of its range or malformed"),
        ("0 0 31 2 *", "UTC", "skip", "never fires"),
        ("0 0 30 2 *", "UTC", "skip", "never fires"),
        ("* * * *", "UTC", "skip", "five fields"),
        ("* * * * * 5", "UTC", "skip", "five fields"),
        ("* * * * *", "Mars/Olympus", "skip", "unknown time zone 'Mars/Olympus'"),
        ("* * * * *", "UTC", "later", "misfire policy 'later'"),
        ("5-1 * * * *", "UTC", "skip", "the minute range 5-1 runs backwards; .* write two ranges: 5-59,0-1"),
        ("0 22-2 * * *", "UTC", "skip", "the hour range 22-2 runs backwards; .*: 22-23,0-2"),
        ("0 0 * * FRI-MON", "UTC", "skip", "the day-of-week range FRI-MON runs backwards; .*: FRI-6,0-MON"),
        ("0 0 * DEC-FEB *", "UTC", "skip", "the month range DEC-FEB runs backwards"),
        ("0 0 20-10/2 * *", "UTC", "skip", "the day-of-month range 20-10 runs backwards"),
        ("5-5 * * * *", "UTC", "skip", "the minute range 5-5 is one value, .*: write 5"),
        ("5-5/10 * * * *", "UTC", "skip", "the minute range 5-5 is one value"),
        ("0 3-3 * * *", "UTC", "skip", "the hour range 3-3 is one value"),
        ("0 0 * * TUE-TUE", "UTC", "skip", "the day-of-week range TUE-TUE is one value, .*: write TUE"),
        ("0 0 * * SUN-0", "UTC", "skip", "the day-of-week range SUN-0 is one value"),
        ("0 0 * * 7-0", "UTC", "skip", "the day-of-week range 7-0 is one value"),
        ("0 0 * JAN-0 *", "UTC", "skip", "the month range JAN-0 goes outside 1-12"),
    ],
)
def test_bad_specs_are_refused_with_what_is_wrong(cron: str, tz: str, misfire: str, message: str) -> None:
    with pytest.raises(ScheduleSpecError, match=message):
        check_spec(cron, tz, misfire)


@pytest.mark.parametrize(
    "cron", ["1-5 * * * *", "0 0 * * SAT-SUN", "0 0 * * 6-0", "0 0 * * 5-7", "0 0 * * 0-7", "0 0 * * 7-1", "0 0 L * *"]
)
def test_forward_ranges_and_sunday_as_a_ranges_end_are_accepted(cron: str) -> None:
    check_spec(cron, "UTC", "skip")


def test_a_leap_day_schedule_is_not_one_that_never_fires() -> None:
    check_spec("0 0 29 2 *", "UTC", "skip")
    assert next_tick("0 0 29 2 *", "UTC", T0).date().isoformat() == "2028-02-29"
