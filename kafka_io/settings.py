"""Where the cluster is and how clients reach it (KafkaSettings); the topic names are topology.py's."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field, replace
from typing import Any

ENV_BOOTSTRAP = "NEARLINE_BOOTSTRAP_SERVERS"
# librdkafka properties for every client, e.g. NEARLINE_KAFKA_SECURITY_PROTOCOL=SASL_SSL
# becomes security.protocol; this is how production adds TLS/SASL without code changes.
ENV_KAFKA_PREFIX = "NEARLINE_KAFKA_"


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str
    client_id: str = "nearline"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, bootstrap_servers: str | None = None, client_id: str = "nearline") -> KafkaSettings:
        servers = bootstrap_servers or os.environ.get(ENV_BOOTSTRAP, "")
        extra = {
            key[len(ENV_KAFKA_PREFIX) :].lower().replace("_", "."): value
            for key, value in os.environ.items()
            if key.startswith(ENV_KAFKA_PREFIX)
        }
        return cls(servers, client_id, extra)

    def with_client_id(self, client_id: str) -> KafkaSettings:
        return replace(self, client_id=client_id)

    @property
    def principal(self) -> str:
        """Who these settings log in as, in Kafka's words: User:NAME for SASL, User:<the
        certificate's subject> for mutual TLS, User:ANONYMOUS otherwise. Never a secret."""
        protocol = str(self.extra.get("security.protocol", "PLAINTEXT")).upper()
        if protocol.startswith("SASL"):
            return f"User:{self.extra.get('sasl.username', '(no sasl.username)')}"
        certificate = self.extra.get("ssl.certificate.location")
        if protocol == "SSL" and certificate:
            return f"User:{certificate_subject(str(certificate))}"
        return "User:ANONYMOUS"


# Kafka names a certificate's principal by its subject in RFC 2253's order and short names
_DN_NAMES = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
}


def certificate_subject(path: str) -> str:
    """The subject of the PEM certificate at `path` as Kafka's default principal builder names it
    (CN=worker,O=example), or the path where it cannot be read."""
    try:
        decoded = ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]
    except (OSError, ssl.SSLError, AttributeError):
        return f"(the certificate in {path})"
    parts = [f"{_DN_NAMES.get(k, k)}={v}" for rdn in reversed(decoded.get("subject", ())) for k, v in rdn]
    return ",".join(parts) or f"(the certificate in {path})"
