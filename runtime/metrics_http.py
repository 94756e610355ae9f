"""The /metrics endpoint's server: prometheus_client's WSGI app over plain HTTP or TLS.

prometheus_client's own start_http_server puts TLS on the listening socket, so each handshake
runs inside accept() on its one serving thread, with no timeout: one peer that connects and
sends nothing (a port scan, a TCP health check, a client without a certificate that stalls)
stops every scrape until it goes away. Here the listening socket stays plain and each accepted
connection does its handshake in its own thread, under a timeout.
"""

from __future__ import annotations

import logging
import ssl
import threading
from socket import socket
from typing import Any, NoReturn
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import REGISTRY, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from runtime.metrics_endpoint import MetricsEndpoint, MetricsPortError

log = logging.getLogger(__name__)

# A connection that has not sent its request (or finished its handshake) this long is dropped.
CONNECTION_TIMEOUT_S = 10.0


class _Handler(WSGIRequestHandler):
    timeout = CONNECTION_TIMEOUT_S

    def setup(self) -> None:
        super().setup()  # applies the timeout, to the handshake too
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every few seconds is not worth a log line


class _Server(ThreadingWSGIServer):
    tls: ssl.SSLContext | None = None

    def get_request(self) -> tuple[socket, Any]:
        connection, address = super().get_request()
        if self.tls is not None:
            connection = self.tls.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
        return connection, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a failed handshake, a timeout or a reset is the peer's business, not a traceback on stderr
        log.debug("metrics connection from %s failed", client_address, exc_info=True)


def start_server(endpoint: MetricsEndpoint) -> None:
    """Serve REGISTRY at endpoint from daemon threads; MetricsPortError naming the option at fault."""
    tls = tls_context(endpoint) if endpoint.tls_cert is not None else None
    try:
        server = make_server(endpoint.addr, endpoint.port, make_wsgi_app(REGISTRY), _Server, _Handler)
    except OSError as exc:
        raise MetricsPortError(f"--metrics-port {endpoint.port}: {exc.strerror or exc}") from None
    server.tls = tls
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()


def tls_context(endpoint: MetricsEndpoint) -> ssl.SSLContext:
    """The server's TLS context, from files checked one by one so that a failure names its option."""
    assert endpoint.tls_cert is not None
    key = endpoint.tls_key or endpoint.tls_cert  # a certificate file may hold its key
    for option, path in (
        ("--metrics-tls-cert", endpoint.tls_cert),
        ("--metrics-tls-key", endpoint.tls_key),
        ("--metrics-client-ca", endpoint.client_ca),
    ):
        if path is not None and not path.is_file():
            raise MetricsPortError(f"{option} {path}: {'not a file' if path.exists() else 'no such file'}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2

    def encrypted() -> NoReturn:
        # Called only for an encrypted key; without it OpenSSL would prompt on the terminal.
        raise MetricsPortError(f"--metrics-tls-key {key}: the key is encrypted; give it unencrypted")

    try:
        context.load_cert_chain(str(endpoint.tls_cert), str(key), password=encrypted)
    except MetricsPortError:
        raise
    except (ssl.SSLError, OSError) as exc:
        where = f"--metrics-tls-cert {endpoint.tls_cert}" + (f" --metrics-tls-key {key}" if endpoint.tls_key else "")
        raise MetricsPortError(f"{where}: no certificate with its private key loads ({_reason(exc)})") from None
    if endpoint.client_ca is not None:
        try:
            context.load_verify_locations(cafile=str(endpoint.client_ca))
        except (ssl.SSLError, OSError) as exc:
            raise MetricsPortError(
                f"--metrics-client-ca {endpoint.client_ca}: no CA certificate loads ({_reason(exc)})"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
