"""Webhook signatures, the Standard Webhooks way (standardwebhooks.com; OpenAI's webhooks use it).

Each POST carries `webhook-id` (the notification's idempotency key, the same on every retry),
`webhook-timestamp` (unix seconds of this attempt) and `webhook-signature`: `v1,` and the base64
HMAC-SHA256 of `{id}.{timestamp}.{body}` under each secret the notifier holds, space-separated,
so a receiver that knows either the old or the new secret verifies during a rotation. A secret is
`whsec_` followed by base64 of its key bytes, as Standard Webhooks libraries take it.

A secret's key never leaves this module's objects: their repr and str name how many keys there
are, not what they are.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field

PREFIX = "whsec_"
MIN_KEY_BYTES = 16  # below 128 bits, an HMAC key can be guessed; Standard Webhooks asks for 24 to 64


class SecretError(ValueError):
    """A signing secret that is not `whsec_` and base64. The message never holds the secret."""


@dataclass(frozen=True)
class SigningKeys:
    """The keys deliveries are signed with (none: they go unsigned)."""

    keys: tuple[bytes, ...] = field(default=(), repr=False)

    @classmethod
    def parse(cls, secrets: Iterable[str]) -> SigningKeys:
        """From `whsec_...` secrets, in order (the new one first during a rotation, by convention)."""
        return cls(tuple(_key(secret, n) for n, secret in enumerate(secrets, 1)))

    def __repr__(self) -> str:
        return f"SigningKeys({len(self.keys)} key(s))"

    __str__ = __repr__

    def headers(self, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        """The Standard Webhooks headers of one attempt; only `webhook-id` and
        `webhook-timestamp` when there is no key."""
        headers = {"webhook-id": message_id, "webhook-timestamp": str(timestamp)}
        if self.keys:
            signed = f"{message_id}.{timestamp}.".encode() + body
            headers["webhook-signature"] = " ".join(f"v1,{_signature(key, signed)}" for key in self.keys)
        return headers


def _signature(key: bytes, signed: bytes) -> str:
    return base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def _key(secret: str, n: int) -> bytes:
    secret = secret.strip()
    if not secret.startswith(PREFIX):
        raise SecretError(f"signing secret {n} does not start with {PREFIX!r} (Standard Webhooks' form)")
    encoded = secret[len(PREFIX) :]
    try:  # unpadded base64 too, as Standard Webhooks libraries take it
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise SecretError(f"signing secret {n}: what follows {PREFIX!r} is not base64") from None
    if len(key) < MIN_KEY_BYTES:
        raise SecretError(
            f"signing secret {n} holds {len(key)} byte(s): give at least {MIN_KEY_BYTES} (24 to 64 advised)"
        )
    return key


def read_secret_file(text: str) -> list[str]:
    """The secrets of a --signing-secret-file: one a line; blank lines and `#` lines are skipped."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
