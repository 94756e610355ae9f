"""What the scheduler measures for Prometheus: the tick claims it appended and the jobs it submitted.

Without --metrics-port the scheduler holds the base SchedulerMetrics, whose methods do nothing.
"""

from __future__ import annotations

from prometheus_client import Counter

from kafka_io.metrics import serve_metrics
from runtime.metrics_endpoint import MetricsEndpoint

WORKER = "scheduler"

TICKS_CLAIMED = Counter(
    "nearline_scheduler_ticks_claimed_total",
    "Tick claims this scheduler appended, by outcome: won (first claim of the tick in the log) or lost.",
    ["outcome"],
)
JOBS_SUBMITTED = Counter(
    "nearline_scheduler_jobs_submitted_total", "Jobs this scheduler submitted for the ticks it won."
)
JOBS_FAILED = Counter(
    "nearline_scheduler_jobs_failed_total",
    "Ticks this scheduler won whose job it registered as failed (input missing or invalid, or an internal error).",
)


class SchedulerMetrics:
    """What the scheduler reports. This base reports nothing: the scheduler without --metrics-port."""

    def claimed(self, won: bool) -> None:
        """A claim on a tick, read back from the log: first (won) or not."""

    def submitted(self) -> None:
        """A tick's job submitted."""

    def failed(self) -> None:
        """A tick's job registered as failed."""


class PrometheusSchedulerMetrics(SchedulerMetrics):
    def __init__(self) -> None:
        for outcome in ("won", "lost"):  # both series exist from the start, so rate() sees the first claim
            TICKS_CLAIMED.labels(outcome)

    def claimed(self, won: bool) -> None:
        TICKS_CLAIMED.labels("won" if won else "lost").inc()

    def submitted(self) -> None:
        JOBS_SUBMITTED.inc()

    def failed(self) -> None:
        JOBS_FAILED.inc()


def scheduler_metrics(endpoint: MetricsEndpoint | None) -> SchedulerMetrics:
    """Serve /metrics at `endpoint`, or report nothing when None."""
    if endpoint is None:
        return SchedulerMetrics()
    serve_metrics(endpoint, WORKER)
    return PrometheusSchedulerMetrics()
