"""Webhooks when a job ends (`--notify URL`): the notification log's rules (claims.py), one POST
and its backoff (delivery.py), which followed jobs have ended (endings.py), the worker that
claims and delivers each notification once (notifier.py, `nearline worker notifier`), and what
`status` shows of a notification (status.py).

What does not belong here: the job's state and its status document (jobs/registry.py), parsing
--notify (jobs/job_terms.py) and the CLI (jobs/cli/workers.py).
"""
