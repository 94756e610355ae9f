"""Why waiting on a job stopped early, and the rule that says no worker is left to finish it."""

from __future__ import annotations

from dataclasses import dataclass, field

from jobs.exit_codes import ExitCode
from results.outcome import JobFold


class JobWaitError(Exception):
    """Waiting ended before the job completed; outcome holds what had arrived by then."""

    exit_code = ExitCode.FAILED

    def __init__(self, message: str, outcome: JobFold | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome


class WorkersGoneError(JobWaitError):
    exit_code = ExitCode.WORKERS_GONE


class JobTimeoutError(JobWaitError, TimeoutError):  # callers that caught TimeoutError still do
    exit_code = ExitCode.TIMED_OUT


class JobCancelledError(JobWaitError):
    """The job's submission was cancelled while a wait followed it: no more of it will be run."""

    exit_code = ExitCode.CANCELLED


class JobExpiredError(JobWaitError):
    """The job's completion window passed while a wait followed it: its remaining records are skipped."""

    exit_code = ExitCode.EXPIRED


class JobInterrupted(JobWaitError):
    """Ctrl-C, SIGTERM or SIGHUP while waiting: the shell's convention, 128 + the signal number."""

    def __init__(self, message: str, signum: int, outcome: JobFold | None = None) -> None:
        super().__init__(message, outcome)
        self.exit_code = 128 + signum  # type: ignore[assignment]


@dataclass
class Liveness:
    """Workers count as gone once none has been seen alive, and no record completed, for grace_s.

    Progress counts as a sign of life: a group can be between members (a rebalance, a restart)
    while its records still arrive."""

    grace_s: float
    last_alive: float
    last_done: int = field(default=0)

    def observe(self, now: float, alive: bool, done: int) -> None:
        if alive or done > self.last_done:
            self.last_alive = now
        self.last_done = done

    def gone_for(self, now: float) -> float | None:
        """Seconds since the last sign of life once past grace_s, else None."""
        silent = now - self.last_alive
        return silent if silent > self.grace_s else None
