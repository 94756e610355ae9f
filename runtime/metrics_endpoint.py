"""Where and how a worker serves /metrics (the options, their environment variables, the error
that says one cannot be served), apart from the server itself (metrics_http.py), so the CLI
reads and maps them without importing prometheus_client."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The metrics port every worker reads (--metrics-port), which deployments set once per pod, and
# the TLS files it serves them with (--metrics-tls-cert, --metrics-tls-key, --metrics-client-ca).
ENV_METRICS_PORT = "NEARLINE_METRICS_PORT"
ENV_METRICS_TLS_CERT = "NEARLINE_METRICS_TLS_CERT"
ENV_METRICS_TLS_KEY = "NEARLINE_METRICS_TLS_KEY"
ENV_METRICS_CLIENT_CA = "NEARLINE_METRICS_CLIENT_CA"
ENV_METRICS = (ENV_METRICS_PORT, ENV_METRICS_TLS_CERT, ENV_METRICS_TLS_KEY, ENV_METRICS_CLIENT_CA)


class MetricsPortError(OSError):
    """The --metrics-port cannot be bound (taken, or privileged), or its TLS files cannot be
    loaded: a usage error, not a Kafka one, kept apart from the server so the CLI maps it
    without importing prometheus_client."""


@dataclass(frozen=True)
class MetricsEndpoint:
    """Where and how a worker serves /metrics: plain HTTP, or TLS when `tls_cert` is set.

    `tls_key` may be left out when the certificate file holds the key too. With `client_ca`,
    only scrapers presenting a certificate that CA signed are answered (mutual TLS): the
    endpoint names topics, models and hosts, which a shared network need not see."""

    port: int
    addr: str = "0.0.0.0"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    client_ca: Path | None = None

    def __post_init__(self) -> None:
        if self.tls_cert is None and (self.tls_key is not None or self.client_ca is not None):
            raise MetricsPortError("--metrics-tls-key and --metrics-client-ca need --metrics-tls-cert")
