"""What a secured Apache Kafka node of the tests needs (tests/support/apache_kafka.py): a CA and
the broker's certificate made with openssl (SANs for 127.0.0.1 and localhost), a client
certificate for the mutual-TLS listener (its key under a password), a second CA that signed
nothing the broker holds, SCRAM-SHA-512 users with random passwords, the broker's settings, and
the NEARLINE_KAFKA_* environment of a client of each kind.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_io.settings import ENV_KAFKA_PREFIX

SCRAM = "SCRAM-SHA-512"
ADMIN = "admin"
BROKER_DN = "CN=broker"
TLS_CLIENT_DN = "CN=nearline-tls-worker"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _openssl(folder: Path, *args: str) -> None:
    done = subprocess.run(["openssl", *args], cwd=folder, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {done.stderr}")


def _ca(folder: Path, name: str) -> None:
    _openssl(
        folder,
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "3", "-subj", f"/CN=nearline test {name}"),
    )


def _signed(folder: Path, name: str, dn: str, extensions: str, key_password: str | None = None) -> None:
    """`name`.key and `name`.crt: a P-256 key (under `key_password` where given) and a
    certificate for subject `dn` signed by the CA `ca`."""
    key = ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key"]
    if key_password is not None:
        key += ["-aes-256-cbc", "-pass", f"pass:{key_password}"]
    _openssl(folder, *key)
    (folder / f"{name}.ext").write_text(extensions, encoding="utf-8")
    passin = ["-passin", f"pass:{key_password}"] if key_password is not None else []
    _openssl(folder, "req", "-new", "-key", f"{name}.key", *passin, "-subj", "/" + dn, "-out", f"{name}.csr")
    _openssl(
        folder,
        *("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"),
        *("-out", f"{name}.crt", "-days", "3", "-extfile", f"{name}.ext"),
    )


@dataclass(frozen=True)
class Security:
    """The certificates under `folder` and the SCRAM users' passwords (`admin` the super user)."""

    folder: Path
    passwords: dict[str, str] = field(repr=False)
    key_password: str = field(repr=False)

    @classmethod
    def make(cls, folder: Path, users: list[str]) -> Security:
        folder.mkdir(parents=True, exist_ok=True)
        _ca(folder, "ca")
        _ca(folder, "rogue-ca")  # signed nothing the broker holds: a client trusting only it fails TLS
        _signed(
            folder,
            "broker",
            BROKER_DN,
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        # Kafka's PEM key store: the key (PKCS#8) and its certificate in one file
        keystore = (folder / "broker.key").read_text() + (folder / "broker.crt").read_text()
        (folder / "broker-keystore.pem").write_text(keystore, encoding="utf-8")
        key_password = "kp-" + secrets.token_hex(12)
        _signed(folder, "client", TLS_CLIENT_DN, "extendedKeyUsage=clientAuth\n", key_password)
        passwords = {user: "pw-" + secrets.token_hex(12) for user in {ADMIN, *users}}
        return cls(folder, passwords, key_password)

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def rogue_ca(self) -> Path:
        return self.folder / "rogue-ca.pem"

    def secrets(self) -> list[str]:
        """Every secret a client of this node is given: what no output, log or metric may show."""
        return [*self.passwords.values(), self.key_password]

    def format_args(self) -> list[str]:
        """kafka-storage format's arguments that make the SCRAM users (KRaft: no ZooKeeper to
        hold them, and none may log in to make the others)."""
        return [
            arg
            for user, password in sorted(self.passwords.items())
            for arg in ("--add-scram", f"{SCRAM}=[name={user},password={password}]")
        ]

    def server_settings(self, host: str, port: int, tls_port: int, controller_port: int) -> dict[str, str]:
        """The node's listeners (SASL_SSL on `port`, mutual TLS on `tls_port`, the controller's own
        on loopback in plain text) and its authorizer: no ACL means denied. The broker talks to
        itself over the mutual-TLS listener as CN=broker; the controller listener's principal is
        ANONYMOUS, which the controller must let register the broker, so both are super users
        with the admin. Clients reach only the two secured listeners."""
        return {
            "listeners": f"SASL_SSL://{host}:{port},SSL://{host}:{tls_port},CONTROLLER://{host}:{controller_port}",
            "advertised.listeners": f"SASL_SSL://{host}:{port},SSL://{host}:{tls_port}",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "SSL",
            "sasl.enabled.mechanisms": SCRAM,
            f"listener.name.sasl_ssl.{SCRAM.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.folder / "broker-keystore.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "listener.name.ssl.ssl.client.auth": "required",
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{ADMIN};User:{BROKER_DN};User:ANONYMOUS",
        }

    def sasl_client(self, user: str, password: str | None = None, ca: Path | None = None) -> dict[str, Any]:
        """librdkafka properties of a SCRAM login as `user` (its own password unless given)."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM,
            "sasl.username": user,
            "sasl.password": password if password is not None else self.passwords[user],
            "ssl.ca.location": str(ca or self.ca),
        }

    def tls_client(self) -> dict[str, Any]:
        """librdkafka properties of a mutual-TLS client: the principal is User:CN=nearline-tls-worker."""
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca),
            "ssl.certificate.location": str(self.folder / "client.crt"),
            "ssl.key.location": str(self.folder / "client.key"),
            "ssl.key.password": self.key_password,
        }


def kafka_env(properties: dict[str, Any]) -> dict[str, str]:
    """The NEARLINE_KAFKA_* variables that give a nearline process these librdkafka properties
    (kafka_io/settings.py: the name after the prefix, lower-cased, `_` read as `.`)."""
    return {ENV_KAFKA_PREFIX + key.upper().replace(".", "_"): str(value) for key, value in properties.items()}
