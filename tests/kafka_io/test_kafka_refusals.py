"""Kafka's refusals told apart from its outages, on the client's own error values (KafkaError is
what librdkafka hands the error callback and raises): each kind its error, its exit code and one
line, naming the principal and never a secret. tests/trials/test_secured_kafka.py shows the same
against a secured Apache Kafka."""

from __future__ import annotations

import threading
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException

from jobs.cli.group import NearlineGroup
from jobs.exit_codes import ExitCode
from jobs.outages import OutageLog, step_until_stopped
from kafka_io.clients import as_refusal, make_admin, make_producer
from kafka_io.errors import (
    KAFKA_FAULTS,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaRefusedError,
    KafkaTlsError,
    refused_error,
)
from kafka_io.settings import KafkaSettings

# librdkafka's own words, as its error callback gave them against Apache Kafka 4.1.1
WRONG_PASSWORD = (
    "sasl_ssl://127.0.0.1:22236/bootstrap: SASL authentication error: Authentication failed during "
    "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 323ms in state AUTH_REQ)"
)
NO_SUCH_MECHANISM = (
    "sasl_ssl://127.0.0.1:22236/bootstrap: SASL PLAIN mechanism handshake failed: Broker: Unsupported SASL "
    "mechanism: broker's supported mechanisms: SCRAM-SHA-512 (after 306ms in state AUTH_HANDSHAKE)"
)
UNKNOWN_CA = (
    "sasl_ssl://127.0.0.1:22236/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate "
    "verify failed: broker certificate could not be verified, verify that ssl.ca.location is correctly "
    "configured or root CA certificates are installed (install ca-certificates package) "
    "(after 22ms in state SSL_HANDSHAKE)"
)
NO_CLIENT_CERTIFICATE = (
    "ssl://127.0.0.1:31502/bootstrap: Receive failed: error:0A000412:SSL routines::ssl/tls alert bad "
    "certificate: SSL alert number 42 (after 6ms in state APIVERSION_QUERY)"
)


def test_a_refused_login_is_an_authentication_error_naming_the_user() -> None:
    for text in (WRONG_PASSWORD, NO_SUCH_MECHANISM):
        refused = refused_error(KafkaError(KafkaError._AUTHENTICATION, text), "User:alice")
        assert isinstance(refused, KafkaAuthenticationError)
        assert str(refused).startswith("Kafka refused the login of User:alice: ")


def test_a_failed_tls_handshake_is_a_tls_error_under_either_code_librdkafka_gives_it() -> None:
    assert isinstance(refused_error(KafkaError(KafkaError._SSL, UNKNOWN_CA), "User:alice"), KafkaTlsError)
    refused = refused_error(KafkaError(KafkaError._TRANSPORT, NO_CLIENT_CERTIFICATE), "User:ANONYMOUS")
    assert isinstance(refused, KafkaTlsError)
    # the listener's name holds "ssl" in every error of a TLS connection: that alone is no TLS failure
    down = "sasl_ssl://127.0.0.1:22236/bootstrap: Connect to ipv4#127.0.0.1:22236 failed: Connection refused"
    assert refused_error(KafkaError(KafkaError._TRANSPORT, down), "User:alice") is None
    # nor is a connection that a broker going down closed mid-handshake or mid-login
    for state in ("SSL_HANDSHAKE", "AUTH_REQ"):
        cut = f"sasl_ssl://127.0.0.1:22236/bootstrap: Disconnected (after 3ms in state {state})"
        assert refused_error(KafkaError(KafkaError._TRANSPORT, cut), "User:alice") is None


def test_an_outage_or_a_timeout_is_no_refusal() -> None:
    for code in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT):
        assert refused_error(KafkaError(code, "1/1 brokers are down"), "User:alice") is None


@pytest.mark.parametrize(
    ("code", "operation", "resource", "said"),
    [
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "Read", "ns.results", "may not Read topic ns.results"),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "Describe", "ns.gpu.tiny", "may not Describe group ns.gpu.tiny"),
        (
            KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "Write",
            "ns.gpu.tiny.a",
            "may not Write transactional id ns.gpu.tiny.a",
        ),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "", "", "was refused by the cluster"),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "", "", "was refused by a topic"),
    ],
)
def test_a_denied_operation_names_the_principal_operation_and_resource(
    code: int, operation: str, resource: str, said: str
) -> None:
    refused = refused_error(KafkaError(code), "User:bob", operation=operation, resource=resource)
    assert isinstance(refused, KafkaAuthorizationError)
    assert f"not authorized: User:bob {said} (Kafka said {KafkaError(code).name()})" in str(refused)


def test_a_refusal_is_no_fault_an_outage_loop_retries() -> None:
    assert not issubclass(KafkaRefusedError, KAFKA_FAULTS)
    said: list[str] = []
    steps: list[int] = []

    def step() -> None:
        steps.append(1)
        raise KafkaAuthorizationError("not authorized: User:bob may not Read topic ns.jobs")

    with pytest.raises(KafkaAuthorizationError):
        step_until_stopped(threading.Event(), step, lambda: None, OutageLog("scheduler", said.append, 0.01), 0.01)
    assert steps == [1] and said == []  # raised at once: not "Kafka unavailable, retrying"


def test_the_principal_is_the_sasl_user_the_certificate_or_anonymous_and_never_a_secret() -> None:
    sasl = KafkaSettings(
        "h:1", extra={"security.protocol": "SASL_SSL", "sasl.username": "u1", "sasl.password": "pw-secret"}
    )
    assert sasl.principal == "User:u1"
    assert KafkaSettings("h:1").principal == "User:ANONYMOUS"
    missing = KafkaSettings("h:1", extra={"security.protocol": "SSL", "ssl.certificate.location": "/nonexistent.pem"})
    assert missing.principal == "User:(the certificate in /nonexistent.pem)"
    refused = refused_error(KafkaError(KafkaError._AUTHENTICATION, WRONG_PASSWORD), sasl.principal)
    assert "pw-secret" not in str(refused)


def test_a_client_calls_own_exception_is_read_for_its_refusal() -> None:
    refused = as_refusal(KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)), "Read", "ns.preprocess")
    assert isinstance(refused, KafkaAuthorizationError)
    assert as_refusal(KafkaException(KafkaError(KafkaError._TIMED_OUT))) is None
    assert as_refusal(ValueError("not kafka")) is None


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (KafkaAuthenticationError("Kafka refused the login of User:alice: ..."), ExitCode.NOT_AUTHENTICATED),
        (KafkaAuthorizationError("not authorized: User:alice may not Read topic t"), ExitCode.NOT_AUTHORIZED),
        (KafkaTlsError("TLS handshake with Kafka failed for User:alice: ..."), ExitCode.TLS_FAILED),
        (KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), ExitCode.NOT_AUTHORIZED),
    ],
)
def test_each_refusal_exits_with_its_own_code_in_one_line(raised: Exception, code: ExitCode) -> None:
    @click.group(cls=NearlineGroup)
    def root() -> None:
        pass

    @root.command()
    def go() -> None:
        raise raised

    done = CliRunner().invoke(root, ["go"])
    assert done.exit_code == code, done.output
    assert len(done.output.strip().splitlines()) == 1 and done.output.startswith("error: "), done.output
    assert "Traceback" not in done.output


def test_the_refusal_exit_codes_are_distinct_from_every_other() -> None:
    codes = [ExitCode.NOT_AUTHENTICATED, ExitCode.NOT_AUTHORIZED, ExitCode.TLS_FAILED]
    others = [c for c in ExitCode if c not in codes]
    assert len(set(codes)) == 3 and not set(codes) & set(others)


def test_tls_files_a_client_cannot_use_are_a_tls_error_in_a_line_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate")
    for ca in (tmp_path / "missing.pem", tmp_path / "ca.pem"):
        settings = KafkaSettings("127.0.0.1:1", extra={"security.protocol": "SSL", "ssl.ca.location": str(ca)})
        with pytest.raises(KafkaTlsError, match=r"the TLS settings \(NEARLINE_KAFKA_SSL_\*\) cannot be used: .*ssl.ca"):
            make_producer(settings)
        with pytest.raises(KafkaTlsError):
            make_admin(settings)


def test_a_faust_worker_crashed_of_aiokafkas_refusal_gets_the_same_error_as_every_other_client() -> None:
    import ssl

    from aiokafka import errors as aiokafka_errors

    from kafka_io.faust_auth import faust_refusal

    # aiokafka wraps a denied offset fetch in a plain KafkaError that only repeats the inner error's name
    wrapped = aiokafka_errors.KafkaError(repr(aiokafka_errors.TopicAuthorizationFailedError()))
    refused = faust_refusal(wrapped, "User:pre")
    assert isinstance(refused, KafkaAuthorizationError)
    assert str(refused).startswith("not authorized: User:pre was refused by a topic")
    assert isinstance(
        faust_refusal(aiokafka_errors.GroupAuthorizationFailedError(), "User:pre"), KafkaAuthorizationError
    )
    assert isinstance(faust_refusal(aiokafka_errors.SaslAuthenticationFailed(), "User:pre"), KafkaAuthenticationError)
    try:
        try:
            raise ssl.SSLCertVerificationError("certificate verify failed")
        except ssl.SSLError as exc:
            raise RuntimeError("faust crashed") from exc
    except RuntimeError as crash:
        assert isinstance(faust_refusal(crash, "User:pre"), KafkaTlsError)
    assert faust_refusal(aiokafka_errors.KafkaConnectionError(), "User:pre") is None
    assert faust_refusal(None, "User:pre") is None
