"""What the notifier measures for Prometheus: its delivery attempts, by outcome, and the
notifications it gave up on.

Without --metrics-port the notifier holds the base NotifierMetrics, whose methods do nothing.
"""

from __future__ import annotations

from prometheus_client import Counter

from kafka_io.metrics import serve_metrics
from runtime.metrics_endpoint import MetricsEndpoint

WORKER = "notifier"

ATTEMPTS = Counter(
    "nearline_notifier_attempts_total",
    "Webhook deliveries this notifier attempted, by outcome: delivered (a 2xx answer) or failed (no "
    "answer, another status, or a URL that cannot be POSTed to).",
    ["outcome"],
)
GAVE_UP = Counter(
    "nearline_notifier_gave_up_total",
    "Notifications this notifier gave up on (retries spent, or a URL that can never be POSTed to).",
)


class NotifierMetrics:
    """What the notifier reports. This base reports nothing: the notifier without --metrics-port."""

    def posted(self, delivered: bool) -> None:
        """An attempt delivered, or failed."""

    def gave_up(self) -> None:
        """A notification given up on."""


class PrometheusNotifierMetrics(NotifierMetrics):
    def __init__(self) -> None:
        for outcome in ("delivered", "failed"):  # both series exist from the start, so rate() sees the first
            ATTEMPTS.labels(outcome)

    def posted(self, delivered: bool) -> None:
        ATTEMPTS.labels("delivered" if delivered else "failed").inc()

    def gave_up(self) -> None:
        GAVE_UP.inc()


def notifier_metrics(endpoint: MetricsEndpoint | None) -> NotifierMetrics:
    """Serve /metrics at `endpoint`, or report nothing when None."""
    if endpoint is None:
        return NotifierMetrics()
    serve_metrics(endpoint, WORKER)
    return PrometheusNotifierMetrics()
