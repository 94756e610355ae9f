"""Recurring jobs: cron expressions (cron.py), the schedule and tick-claim tables (schedules.py)
and the scheduler process that claims each tick once and submits its job (scheduler.py).

What does not belong here: submitting itself (jobs/submit.py) and the CLI (jobs/cli/schedule.py).
"""
