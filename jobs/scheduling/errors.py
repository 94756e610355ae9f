"""What a user can get wrong about a schedule. Apart from cron.py, so the CLI maps these to exit
codes without importing croniter for every command."""


class ScheduleSpecError(ValueError):
    """A schedule name, cron expression, time zone or misfire policy that cannot be used (exit 2)."""


class ScheduleExistsError(ValueError):
    """`schedule add` of a name that exists, without --replace (exit 2)."""


class ScheduleNotFoundError(LookupError):
    """No schedule of that name (exit 1)."""
