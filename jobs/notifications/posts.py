"""A webhook POST as the notifier hands it to its pool and gets it back: which receiver it holds a
slot of (one POST in flight per receiver), and what it came to."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from urllib.parse import urlsplit

from jobs.notifications.delivery import Answer
from schemas import Job


@dataclass(frozen=True)
class InFlight:
    """A POST handed to the pool."""

    job: Job
    claim_id: str
    receiver: str  # scheme://host:port: one POST in flight each
    future: Future[Attempt]


def receiver_of(url: str) -> str:
    """Where a POST goes, as one slow receiver: scheme, host and port, the port a scheme's default
    when not written (http://h and http://h:80 are one receiver, holding one slot between them)."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        port = parts.port or (443 if scheme == "https" else 80)
        host = (parts.hostname or "").rstrip(".")  # h. is h: the resolver's root dot
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
    except ValueError:
        return url


@dataclass(frozen=True)
class Attempt:
    """What a POST (run on the pool) came to. answer None: none was made, for `reason`."""

    job: Job
    claim_id: str
    job_state: str | None
    answer: Answer | None
    reason: str | None = None
    final: bool = False  # with no answer: the notification can never be sent
