"""One webhook POST and the retry policy around it.

The body is the job's `status --json` document; the headers say what it is (Content-Type
application/json), which submission it tells of (Idempotency-Key: JOB_ID/SUBMISSION, the same on
every retry, from every notifier) and who sends it (User-Agent: nearline/VERSION). A 2xx answer
delivers it; anything else (no such host, refused, no answer within the timeout, any other status,
a redirect, which is never followed) is a failed attempt with its reason, retried after a delay
that doubles from the first retry's up to the longest, until the policy gives up.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from urllib.parse import urlsplit

from jobs.job_terms import webhook_problem
from jobs.notifications.claims import NotificationState

# The most of a refusing receiver's answer kept in the reason: enough to read, never a page.
ANSWER_EXCERPT_CHARS = 200


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed notification is tried again, and when it is given up."""

    first_retry_s: float = 1.0
    max_retry_s: float = 60.0
    max_attempts: int | None = None  # None: only give_up_after_s ends the retries
    give_up_after_s: float = 24 * 3600.0  # counted from the first attempt

    def __post_init__(self) -> None:
        if not 0 < self.first_retry_s <= self.max_retry_s:
            raise ValueError(
                f"the first retry ({self.first_retry_s:g} s) must be after 0 s and no later than the longest "
                f"({self.max_retry_s:g} s)"
            )
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"at most {self.max_attempts} attempts: give at least 1")
        if self.give_up_after_s <= 0:
            raise ValueError(f"give up after {self.give_up_after_s:g} s: give a time after 0 s")

    def delay_after(self, attempts: int) -> float:
        """Seconds from the `attempts`-th failed attempt to the next: first_retry_s, doubling, at
        most max_retry_s (1, 2, 4, ... 32, 60, 60 s by default)."""
        if attempts <= 0:
            return 0.0
        return min(self.max_retry_s, self.first_retry_s * 2.0 ** min(attempts - 1, 64))

    def next_attempt_at(self, state: NotificationState) -> int:
        """When the next attempt is due, microseconds since the epoch (0: now). From the log, so a
        notifier that takes a notification over keeps to its schedule."""
        if state.last_attempt_at is None:
            return 0
        return state.last_attempt_at + round(self.delay_after(state.attempts) * 1e6)

    def gives_up(self, state: NotificationState, now_us: int) -> bool:
        """Whether no attempt is to follow the ones made."""
        if self.max_attempts is not None and state.attempts >= self.max_attempts:
            return True
        return state.first_attempt_at is not None and now_us - state.first_attempt_at >= self.give_up_after_s * 1e6


@dataclass(frozen=True)
class Answer:
    """How one POST went."""

    delivered: bool
    http_status: int | None = None
    error: str | None = None
    permanent: bool = False  # retrying cannot help: the URL is not one a POST can go to


@cache
def user_agent() -> str:
    try:
        version = metadata.version("nearline")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return f"nearline/{version}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirected POST would reach another URL than the user gave, as a GET without the body
    (urllib's way with 301-303): a 3xx is a failed attempt instead."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def post(url: str, body: bytes, idempotency_key: str, timeout_s: float) -> Answer:
    """POST `body` to `url` once; never raises for what the URL or the receiver does."""
    problem = webhook_problem(url)
    if problem is not None:
        return Answer(False, error=problem, permanent=True)
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key,
            "User-Agent": user_agent(),
        },
    )
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        return Answer(False, exc.code, _refusal(exc))
    except urllib.error.URLError as exc:
        return Answer(False, error=_unreached(url, exc.reason, timeout_s))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Answer(False, error=_unreached(url, exc, timeout_s))
    if 200 <= status < 300:
        return Answer(True, status)
    return Answer(False, status, f"HTTP {status}: not a 2xx answer")


def _refusal(exc: urllib.error.HTTPError) -> str:
    """HTTP STATUS REASON: the start of the answer, or where a redirect pointed."""
    text = f"HTTP {exc.code} {exc.reason}".rstrip()
    if 300 <= exc.code < 400:
        return f"{text}: redirected to {exc.headers.get('Location')}, which a webhook never follows"
    try:
        answer = exc.read(ANSWER_EXCERPT_CHARS + 1).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        answer = ""
    excerpt = " ".join(answer.split())[:ANSWER_EXCERPT_CHARS]
    return f"{text}: {excerpt}" if excerpt else text


def _unreached(url: str, reason: object, timeout_s: float) -> str:
    """Why a POST got no HTTP answer, naming the host."""
    parts = urlsplit(url)
    where = parts.netloc or url
    if isinstance(reason, socket.gaierror):
        return f"cannot resolve host {parts.hostname}: {reason.strerror or reason}"
    if isinstance(reason, TimeoutError):
        return f"no answer from {where} within {timeout_s:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return f"connection refused by {where}"
    if isinstance(reason, ssl.SSLError):
        return f"TLS with {where} failed: {reason}"
    if isinstance(reason, OSError) and reason.strerror:
        return f"{where}: {reason.strerror}"
    return f"{where}: {type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else f"{where}: {reason}"
