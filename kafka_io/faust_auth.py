"""The same NEARLINE_KAFKA_* security settings for the faust preprocess worker as for every
librdkafka client: librdkafka property names mapped to faust credentials (aiokafka underneath).

A security property faust cannot apply is an error at start-up, never silently dropped: a worker
that quietly connects without the TLS or SASL its operator configured is worse than one that
refuses to start.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from faust.auth import SASLCredentials, SSLCredentials
from faust.types.auth import CredentialsT

from kafka_io.errors import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaRefusedError,
    KafkaTlsError,
    SecuritySettingsError,
)

SUPPORTED = frozenset(
    {
        "security.protocol",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
    }
)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def faust_credentials(extra: Mapping[str, Any]) -> CredentialsT | None:
    """faust's broker_credentials for these librdkafka properties; None for PLAINTEXT."""
    security = {k: str(v) for k, v in extra.items() if k.startswith(("ssl.", "sasl.", "security."))}
    unsupported = sorted(set(security) - SUPPORTED)
    if unsupported:
        raise SecuritySettingsError(
            f"the preprocess worker (faust/aiokafka) cannot apply {', '.join(unsupported)}; "
            f"it supports {', '.join(sorted(SUPPORTED))}"
        )
    protocol = security.get("security.protocol", "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return None
    if protocol not in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise SecuritySettingsError(f"unknown security.protocol {protocol!r}")
    context = _ssl_context(security) if protocol in ("SSL", "SASL_SSL") else None
    if protocol == "SSL":
        return SSLCredentials(context)
    mechanism = (security.get("sasl.mechanism") or security.get("sasl.mechanisms") or "").upper()
    if mechanism not in SASL_MECHANISMS:
        raise SecuritySettingsError(
            f"sasl.mechanism {mechanism or '(unset)'!r} is not one the preprocess worker supports "
            f"({', '.join(SASL_MECHANISMS)})"
        )
    if "sasl.username" not in security or "sasl.password" not in security:
        raise SecuritySettingsError(f"{protocol} with {mechanism} needs sasl.username and sasl.password")
    return SASLCredentials(
        username=security["sasl.username"],
        password=security["sasl.password"],
        ssl_context=context,
        mechanism=mechanism,
    )


def _ssl_context(security: Mapping[str, str]) -> ssl.SSLContext:
    try:
        ca = security.get("ssl.ca.location")
        if ca == "probe" or not ca:  # librdkafka's "probe": the system's CA certificates
            context = ssl.create_default_context()
        elif Path(ca).is_dir():
            context = ssl.create_default_context(capath=ca)
        else:
            context = ssl.create_default_context(cafile=ca)
        certificate = security.get("ssl.certificate.location")
        if certificate:
            context.load_cert_chain(certificate, security.get("ssl.key.location"), security.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise SecuritySettingsError(f"TLS settings for the preprocess worker: {exc}") from None
    # librdkafka's "none" turns off host-name checks (certificates are still verified)
    if security.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        context.check_hostname = False
    return context


# aiokafka's refusals by name: it also raises them wrapped in a plain KafkaError whose words are
# the inner error's repr ("KafkaError: TopicAuthorizationFailedError()").
_AIOKAFKA_DENIED = {
    "TopicAuthorizationFailedError": "a topic",
    "GroupAuthorizationFailedError": "a group",
    "TransactionalIdAuthorizationFailed": "a transactional id",
    "ClusterAuthorizationFailedError": "the cluster",
}
_AIOKAFKA_LOGIN = (
    "SaslAuthenticationFailed",
    "AuthenticationFailedError",
    "UnsupportedSaslMechanismError",
    "AuthenticationMethodNotSupported",
    "IllegalSaslStateError",
)


def faust_refusal(exc: BaseException | None, principal: str) -> KafkaRefusedError | None:
    """The refusal a faust worker crashed of (aiokafka's error, or one it caused), as the error
    every other client raises for it; None for any other crash. aiokafka names neither the
    operation nor the resource of a denied one: the kind of resource is what it says."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        said = f"{type(exc).__name__}: {exc}"
        for name, where in _AIOKAFKA_DENIED.items():
            if name in said:
                return KafkaAuthorizationError(
                    f"not authorized: {principal} was refused by {where} (Kafka said {name}); an operator grants "
                    "it with kafka-acls.sh (docs/deploy.md lists what each worker kind needs)"
                )
        if any(name in said for name in _AIOKAFKA_LOGIN):
            return KafkaAuthenticationError(f"Kafka refused the login of {principal}: {said}")
        if isinstance(exc, ssl.SSLError):
            return KafkaTlsError(f"TLS handshake with Kafka failed for {principal}: {said}")
        exc = exc.__cause__ or exc.__context__
    return None
