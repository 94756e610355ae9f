"""Metrics over TLS and mutual TLS: a real worker's endpoint, scraped by urllib and by a real
Prometheus with certificates made here by openssl."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.pipeline import RunningPipeline
from tests.support.prometheus import Prometheus, free_port
from tests.support.promql import ALERTS
from tests.support.waiting import wait_until

JOB = "nearline-scheduler"


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate, all PEM."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        pytest.fail("openssl not found: `apt-get install openssl` (.ci/setup --tests does)")
    subprocess.run([binary, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _signed(name: str, subject: str, extensions: str, cwd: Path) -> None:
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=cwd)  # fmt: skip
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext", cwd=cwd)  # fmt: skip


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    d = tmp_path / "pki"
    d.mkdir()
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=nearline test CA", cwd=d)  # fmt: skip
    _signed("server", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n", d)
    _signed("client", "/CN=prometheus", "extendedKeyUsage=clientAuth\n", d)
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")


def scrape(url: str, context: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, timeout=10, context=context) as answer:
        return str(answer.read().decode())


def wait_serving(pipeline: RunningPipeline, url: str, context: ssl.SSLContext) -> str:
    def answer() -> str | None:
        pipeline.check_workers()
        try:
            return scrape(url, context)
        except (ConnectionRefusedError, urllib.error.URLError) as exc:
            if not isinstance(getattr(exc, "reason", exc), ConnectionRefusedError):
                raise
            return None  # not listening yet

    body = wait_until(answer, 60, f"{url} answering", until=lambda body: body is not None, every_s=0.2)
    assert body is not None
    return body


@pytest.mark.long
def test_with_a_client_ca_only_scrapers_with_a_signed_certificate_are_answered(
    pipeline: RunningPipeline, pki: Pki, tmp_path: Path
) -> None:
    port = free_port()
    pipeline.start(
        "scheduler", "scheduler", "--metrics-port", str(port), "--metrics-tls-cert", str(pki.server_cert),
        "--metrics-tls-key", str(pki.server_key), "--metrics-client-ca", str(pki.ca),
    )  # fmt: skip
    url = f"https://127.0.0.1:{port}/metrics"
    trusted = ssl.create_default_context(cafile=str(pki.ca))
    with_cert = ssl.create_default_context(cafile=str(pki.ca))
    with_cert.load_cert_chain(str(pki.client_cert), str(pki.client_key))

    body = wait_serving(pipeline, url, with_cert)
    assert "nearline_build_info{" in body and 'worker="scheduler"' in body
    # peers that connect and send nothing (a port scan, a TCP health check) hold no other scrape
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        started = time.monotonic()
        assert "nearline_build_info{" in scrape(url, with_cert)
        assert time.monotonic() - started < 5
    finally:
        for connection in idle:
            connection.close()
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionResetError)):
        scrape(url, trusted)  # no client certificate: the handshake is refused
    with pytest.raises((urllib.error.URLError, ConnectionResetError, ssl.SSLError)):
        scrape(url, ssl.create_default_context())  # the server's certificate is not from a public CA
    with pytest.raises((urllib.error.URLError, ConnectionResetError, OSError)):
        scrape(f"http://127.0.0.1:{port}/metrics")  # plain HTTP gets no metrics

    tls = {"ca_file": str(pki.ca), "cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}
    prometheus = Prometheus.start(tmp_path, {JOB: port}, ALERTS, tls=tls)
    try:
        up = f'up{{job="{JOB}"}}'
        wait_until(lambda: prometheus.value(up), 60, f"{up} == 1", until=lambda value: value == 1, every_s=0.5)
        assert prometheus.value(f'nearline_build_info{{job="{JOB}",worker="scheduler"}}') == 1
    finally:
        prometheus.stop()


def metrics_worker(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1"}  # never reached: the endpoint fails first
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", "worker", "scheduler", *args],
        env=env,
        stdin=subprocess.DEVNULL,  # an encrypted key must not ask for its pass phrase
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.process
def test_tls_files_that_do_not_load_are_named_with_exit_code_2(pki: Pki, tmp_path: Path) -> None:
    port = str(free_port())
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    missing = tmp_path / "missing.pem"
    encrypted = tmp_path / "encrypted.key"
    _openssl(
        "pkey", "-in", str(pki.server_key), "-aes256", "-passout", "pass:secret", "-out", str(encrypted), cwd=tmp_path
    )
    cert, key = str(pki.server_cert), str(pki.server_key)
    cases = [
        (["--metrics-tls-cert", str(missing)], f"--metrics-tls-cert {missing}: no such file"),
        (["--metrics-tls-cert", str(garbage)], f"--metrics-tls-cert {garbage}: no certificate with its private key"),
        # a certificate without its key (none given, and none in the file), or with another's key
        (["--metrics-tls-cert", cert], f"--metrics-tls-cert {cert}: no certificate with its private key loads"),
        (["--metrics-tls-cert", cert, "--metrics-tls-key", str(pki.client_key)], "KEY_VALUES_MISMATCH"),
        (["--metrics-tls-cert", cert, "--metrics-tls-key", str(encrypted)], f"{encrypted}: the key is encrypted"),
        (
            ["--metrics-tls-cert", cert, "--metrics-tls-key", key, "--metrics-client-ca", str(garbage)],
            f"--metrics-client-ca {garbage}: no CA certificate loads",
        ),
        (
            ["--metrics-tls-cert", cert, "--metrics-tls-key", key, "--metrics-client-ca", key],
            f"--metrics-client-ca {key}: no CA certificate loads",
        ),
        (["--metrics-tls-key", key], "need --metrics-tls-cert"),
    ]
    for args, message in cases:
        done = metrics_worker("--metrics-port", port, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    without_port = metrics_worker("--metrics-tls-cert", cert, "--metrics-tls-key", key)
    assert without_port.returncode == 2 and "need --metrics-port" in without_port.stderr
