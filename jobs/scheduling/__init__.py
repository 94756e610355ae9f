"""Recurring jobs: cron expressions (cron.py), the schedule and tick-claim tables (schedules.py),
the scheduler process that claims each tick once and submits its job (scheduler.py), and what
it reports to Prometheus (metrics.py).

What does not belong here: submitting itself (jobs/submit.py) and the CLI (jobs/cli/schedule.py).
"""
