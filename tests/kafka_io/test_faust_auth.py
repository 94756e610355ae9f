"""The faust preprocess worker gets the same NEARLINE_KAFKA_* security settings as every other client."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from kafka_io.errors import SecuritySettingsError
from kafka_io.faust_auth import faust_credentials
from kafka_io.settings import KafkaSettings

SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"


def settings_from(monkeypatch: pytest.MonkeyPatch, **env: str) -> KafkaSettings:
    for key in [k for k in os.environ if k.startswith("NEARLINE_KAFKA_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(f"NEARLINE_KAFKA_{key}", value)
    return KafkaSettings.from_env("broker:9093")


def test_no_security_settings_is_plaintext(monkeypatch: pytest.MonkeyPatch) -> None:
    assert faust_credentials(settings_from(monkeypatch, LINGER_MS="5").extra) is None
    assert credentials_to_aiokafka_auth(None) == {"security_protocol": "PLAINTEXT"}


def test_sasl_ssl_with_scram_reaches_aiokafka_as_librdkafka_spells_it(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_from(
        monkeypatch,
        SECURITY_PROTOCOL="SASL_SSL",
        SASL_MECHANISM="SCRAM-SHA-512",
        SASL_USERNAME="nearline",
        SASL_PASSWORD="s3cret",
        SSL_CA_LOCATION=SYSTEM_CA,
    )
    auth = credentials_to_aiokafka_auth(faust_credentials(settings.extra))
    assert auth["security_protocol"] == "SASL_SSL"
    assert auth["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (auth["sasl_plain_username"], auth["sasl_plain_password"]) == ("nearline", "s3cret")
    context = auth["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # the CA file was loaded


def test_sasl_plaintext_has_no_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_from(
        monkeypatch, SECURITY_PROTOCOL="SASL_PLAINTEXT", SASL_MECHANISMS="PLAIN", SASL_USERNAME="u", SASL_PASSWORD="p"
    )
    auth = credentials_to_aiokafka_auth(faust_credentials(settings.extra))
    assert auth["security_protocol"] == "SASL_PLAINTEXT" and auth["sasl_mechanism"] == "PLAIN"
    assert auth["ssl_context"] is None


@pytest.mark.process
def test_mutual_tls_loads_the_client_certificate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key, cert = tmp_path / "client.key", tmp_path / "client.pem"
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=nearline"]
    subprocess.run(
        [*openssl, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    settings = settings_from(
        monkeypatch,
        SECURITY_PROTOCOL="SSL",
        SSL_CA_LOCATION=str(cert),
        SSL_CERTIFICATE_LOCATION=str(cert),
        SSL_KEY_LOCATION=str(key),
        SSL_ENDPOINT_IDENTIFICATION_ALGORITHM="none",
    )
    auth = credentials_to_aiokafka_auth(faust_credentials(settings.extra))
    assert auth["security_protocol"] == "SSL"
    assert auth["ssl_context"].check_hostname is False
    with pytest.raises(SecuritySettingsError, match="TLS settings"):
        faust_credentials({**settings.extra, "ssl.key.location": str(cert)})  # not a key


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SECURITY_PROTOCOL": "SSL", "SSL_KEYSTORE_LOCATION": "/k.p12"}, "ssl.keystore.location"),
        ({"SECURITY_PROTOCOL": "SASL_SSL", "SASL_MECHANISM": "GSSAPI"}, "GSSAPI"),
        ({"SECURITY_PROTOCOL": "SASL_SSL", "SASL_MECHANISM": "PLAIN"}, "sasl.username"),
        ({"SECURITY_PROTOCOL": "TLS"}, "TLS"),
    ],
)
def test_a_setting_faust_cannot_apply_is_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    with pytest.raises(SecuritySettingsError, match=named):
        faust_credentials(settings_from(monkeypatch, **env).extra)


def test_the_preprocess_worker_refuses_to_start_without_the_security_it_was_given(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARLINE_KAFKA_")}
    env |= {
        "NEARLINE_BOOTSTRAP_SERVERS": bootstrap_servers,
        "NEARLINE_NAMESPACE": "faust-auth",
        "NEARLINE_KAFKA_SASL_MECHANISM": "OAUTHBEARER",  # librdkafka here has it; our faust mapping has not
        "NEARLINE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "NEARLINE_MODEL_REPOSITORY": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "worker", "preprocess"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "OAUTHBEARER" in done.stderr and "Traceback" not in done.stderr
