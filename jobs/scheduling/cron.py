"""When a schedule's ticks fall and which of them run: pure functions of the cron spec and a clock.

Times are aware datetimes; a schedule's cron is read in its own time zone (so "0 3 * * *" in
Europe/Berlin is 03:00 local across DST changes) and ticks are compared in UTC.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from jobs.scheduling.errors import ScheduleSpecError

Misfire = Literal["skip", "catch-up"]
MISFIRE_POLICIES: tuple[Misfire, ...] = ("skip", "catch-up")


def check_spec(cron: str, timezone: str, misfire: str) -> None:
    if len(cron.split()) != 5:
        raise ScheduleSpecError(
            f"cron expression {cron!r} is not valid: five fields, minute hour day-of-month month day-of-week"
        )
    if not croniter.is_valid(cron):
        raise ScheduleSpecError(
            f"cron expression {cron!r} is not valid: a field is out of its range or malformed "
            "(minute 0-59, hour 0-23, day-of-month 1-31, month 1-12, day-of-week 0-6)"
        )
    problem = range_problem(cron)
    if problem:
        raise ScheduleSpecError(f"cron expression {cron!r}: {problem}")
    next_tick(cron, "UTC", datetime(2000, 1, 1, tzinfo=UTC))  # one that never fires is refused now
    zone(timezone)
    if misfire not in MISFIRE_POLICIES:
        raise ScheduleSpecError(f"misfire policy {misfire!r}: use one of {', '.join(MISFIRE_POLICIES)}")


# (field, lowest, highest, names): what a range in each of the five fields may hold
_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    ("month", 1, 12, ("", "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
    ("day-of-week", 0, 6, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)


def range_problem(cron: str) -> str | None:
    """What is wrong with a range that croniter takes but reads otherwise than cron does, or None.

    - Backwards ("5-1", "22-2", "FRI-MON"): croniter wraps it round the field's end, standard
      cron refuses it, and a slip of the keys ("5-1" for "1-5") would run 57 minutes of every
      hour without a word.
    - Both ends the same ("5-5", "TUE-TUE", "SUN-0"): croniter reads it as the whole field, so
      "5-5" would run every minute instead of at :05.
    - An end outside the field ("JAN-0").
    Day-of-week ranges may end on Sunday as 0, 7 or SUN ("SAT-SUN"), and start on it as 7."""
    for (name, lowest, highest, names), text in zip(_FIELDS, cron.split(), strict=False):
        top = 7 if name == "day-of-week" else highest  # 7 is Sunday too
        for part in text.split(","):
            span = part.split("/")[0]
            if span.count("-") != 1:
                continue
            start_text, end_text = span.split("-")
            start, end = (_field_value(t, names) for t in (start_text, end_text))
            if start is None or end is None:
                continue  # not a plain range; croniter has judged it
            outside = [v for v in (start, end) if not lowest <= v <= top]
            if outside:
                return f"the {name} range {span} goes outside {lowest}-{highest}"
            if name == "day-of-week":
                if {start, end} <= {0, 7} and (start, end) != (0, 7):  # 0-7 is the whole week
                    end = start  # Sunday to Sunday, however written: one day
                else:
                    start, end = start % 7, end or 7  # Sunday starts a range as 0 and ends it as 7
            if start == end:
                return f"the {name} range {span} is one value, which croniter reads as every one: write {start_text}"
            if start > end:
                return (
                    f"the {name} range {span} runs backwards; to wrap round the end, write two ranges: "
                    f"{start_text}-{highest},{lowest}-{end_text}"
                )
    return None


def _field_value(text: str, names: tuple[str, ...]) -> int | None:
    if text.isdigit():
        return int(text)
    return names.index(text.lower()) if text and text.lower() in names else None


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleSpecError(f"unknown time zone {name!r}: use an IANA name such as UTC or Europe/Berlin") from None


def ticks_after(cron: str, timezone: str, after: datetime) -> Iterator[datetime]:
    """The ticks strictly after `after`, in UTC, without end.

    cron is matched against naive wall-clock time and each match is then placed in the zone
    here, because croniter's own zone handling puts some ticks an hour off around DST changes.
    A wall time that happens twice (clocks going back) runs once, at its first occurrence; one
    that never happens (clocks going forward) runs at the same offset as the hour before it.
    """
    tz = zone(timezone)
    it = croniter(cron, after.astimezone(tz).replace(tzinfo=None))
    while True:
        tick = it.get_next(datetime).replace(tzinfo=tz, fold=0).astimezone(UTC)
        if tick > after:
            yield tick


def next_tick(cron: str, timezone: str, after: datetime) -> datetime:
    try:
        return next(ticks_after(cron, timezone, after))
    except CroniterBadDateError:
        raise ScheduleSpecError(
            f"cron expression {cron!r} never fires: no date has its day-of-month and month"
        ) from None


@dataclass(frozen=True)
class TickPlan:
    run: list[datetime]  # oldest first
    skipped: int  # missed ticks that will never run
    first_skipped: datetime | None = None
    last_skipped: datetime | None = None


def plan_ticks(
    cron: str,
    timezone: str,
    misfire: str,
    cursor: datetime,
    now: datetime,
    grace: timedelta,
    max_catch_up: int = 100,
) -> TickPlan:
    """The ticks in (cursor, now] that should run now.

    A tick at most `grace` old is on time and runs under either policy: that is ordinary loop
    latency. Older ones were missed (no scheduler was running): `skip` drops them, `catch-up`
    runs them oldest first, at most `max_catch_up` of the newest so that a schedule left off for
    a month does not flood the pipeline with a month of per-minute jobs. Any policy other than
    catch-up is skip.
    """
    due: list[datetime] = []
    for tick in ticks_after(cron, timezone, cursor):
        if tick > now:
            break
        due.append(tick)
    late = [t for t in due if now - t > grace]
    on_time = due[len(late) :]
    if misfire == "catch-up":
        keep = late[-max_catch_up:] if max_catch_up > 0 else []
        dropped = late[: len(late) - len(keep)]
        return TickPlan([*keep, *on_time], len(dropped), *_span(dropped))
    return TickPlan(on_time, len(late), *_span(late))


def _span(ticks: list[datetime]) -> tuple[datetime | None, datetime | None]:
    return (ticks[0], ticks[-1]) if ticks else (None, None)


def tick_job_id(schedule: str, tick: datetime) -> str:
    """The job a tick submits: the same name for every scheduler that considers the tick."""
    return f"{schedule}-{tick.astimezone(UTC):%Y%m%dT%H%MZ}"


def to_us(t: datetime) -> int:
    return int(t.timestamp() * 1_000_000)


# The instants a datetime holds (years 1 to 9999), in microseconds since the epoch.
_FIRST_US, _LAST_US = -62_135_596_800_000_000, 253_402_300_799_000_000


def from_us(us: int) -> datetime:
    """An instant of the schedule logs, clamped to the years a datetime holds: a row or claim any
    producer may write (active_since or tick_at of 2**62) raised in the scheduler's step, at every
    restart, since the compacted log keeps it. A schedule whose cursor is in year 9999 never ticks."""
    return datetime.fromtimestamp(min(max(us, _FIRST_US), _LAST_US) / 1_000_000, UTC)
