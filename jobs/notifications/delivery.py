"""One webhook POST and the retry policy around it.

The body is the job's `status --json` document; the headers say what it is (Content-Type
application/json), which submission it tells of (Idempotency-Key and webhook-id: JOB_ID/SUBMISSION,
the same on every retry, from every notifier), when this attempt was made and its signature
(webhook-timestamp, webhook-signature: signing.py) and who sends it (User-Agent: nearline/VERSION).
A 2xx answer delivers it; anything else (no such host, no HTTP answer within the timeout, any
other status, a redirect, which is never followed) is a failed attempt with its reason, retried
after a delay that doubles from the first retry's up to the longest, until the policy gives up.
A target the policy refuses (targets.py) is given up at once.

What a reason tells the submitter is measured: a receiver's own words (its reason phrase, the
start of its answer, where it redirects) only for targets the operator allowed by name, since a
service inside the network may answer with what it holds; and one message for every way of not
answering (refused, unreachable, silent, not HTTP), so that reasons cannot map which ports are
open. The notifier's log (`Answer.detail`) says which it was.
"""

from __future__ import annotations

import base64
import http
import time
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from urllib.parse import SplitResult, unquote, urlsplit

from jobs.job_terms import webhook_problem
from jobs.notifications.claims import NotificationState
from jobs.notifications.exchange import NotResolved, Refused, Reply, Request, Unanswered, exchange
from jobs.notifications.signing import SigningKeys
from jobs.notifications.targets import ALLOW_HINT, TargetSettings
from jobs.printable import shown

# The most of a refusing receiver's answer kept in the reason: enough to read, never a page.
ANSWER_EXCERPT_CHARS = 200


@dataclass(frozen=True)
class RetrySettings:
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
    """How one POST went. `error` is what `status` shows; `detail`, for the notifier's log only,
    says more where `error` must not."""

    delivered: bool
    http_status: int | None = None
    error: str | None = None
    permanent: bool = False  # retrying cannot help: the URL is not one a POST can go to
    detail: str | None = None


@dataclass(frozen=True)
class DeliverySettings:
    """How the notifier POSTs: the deadline of one exchange, the addresses it may reach, the keys
    it signs with."""

    timeout_s: float = 10.0
    targets: TargetSettings = field(default_factory=TargetSettings)
    signing: SigningKeys = field(default_factory=SigningKeys)


@cache
def user_agent() -> str:
    try:
        version = metadata.version("nearline")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return f"nearline/{version}"


def post(url: str, body: bytes, idempotency_key: str, config: DeliverySettings) -> Answer:
    """POST `body` to `url` once, within config.timeout_s all told; never raises for what the URL
    or the receiver does."""
    problem = webhook_problem(url, f"'{shown_url(url)}'")  # status shows it to whoever reads the registry
    if problem is not None:
        return Answer(False, error=problem, permanent=True)
    parts = urlsplit(url)
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": idempotency_key,
        "User-Agent": user_agent(),
        **config.signing.headers(idempotency_key, int(time.time()), body),
    }
    if parts.username is not None:  # userinfo is no part of a request line: it is Basic credentials
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(credentials).decode()
    tls = parts.scheme == "https"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    request = Request(tls, parts.hostname or "", parts.port or (443 if tls else 80), target, headers, body)
    where = host_port(parts)
    try:
        reply = exchange(request, config.targets, config.timeout_s)
    except Refused as exc:
        # Given up at once, not retried: the policy does not change while the notifier runs, and a
        # host that resolves to such an address now would be refused at every retry for a day.
        error = f"{parts.hostname} resolves to {exc.why}, which a webhook may not reach; {ALLOW_HINT}"
        return Answer(False, error=error, permanent=True, detail="refused by the target policy")
    except NotResolved as exc:
        return Answer(False, error=f"cannot resolve host {parts.hostname}: {exc.detail}", detail=exc.detail)
    except Unanswered as exc:
        return Answer(False, error=f"no HTTP answer from {where} within {config.timeout_s:g} s", detail=exc.detail)
    if 200 <= reply.status < 300:
        return Answer(True, reply.status)
    return Answer(False, reply.status, refusal(reply, config.targets.explicitly_allowed(reply.address)))


def refusal(reply: Reply, own_receiver: bool) -> str:
    """HTTP STATUS REASON, and for the operator's own receivers the start of the answer, or where
    a redirect pointed; control characters escaped."""
    if not own_receiver:
        text = f"HTTP {reply.status} {_standard_phrase(reply.status)}".rstrip()
        return f"{text}: a redirect, which a webhook never follows" if 300 <= reply.status < 400 else text
    text = shown(f"HTTP {reply.status} {reply.reason}".rstrip())
    if 300 <= reply.status < 400:
        return f"{text}: redirected to {shown(reply.location or '')}, which a webhook never follows"
    answer = reply.body_start.decode("utf-8", "replace")
    excerpt = shown(" ".join(answer.split()))[:ANSWER_EXCERPT_CHARS]
    return f"{text}: {excerpt}" if excerpt else text


def _standard_phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def host_port(parts: SplitResult) -> str:
    """HOST:PORT of a URL, without its userinfo."""
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{parts.port}" if parts.port else host


def shown_url(url: str) -> str:
    """`url` as `status`, `jobs list` and `schedule list` show it to whoever may read the registry:
    its scheme, host, port and path, with its userinfo, the values in its query string and its
    fragment hidden (`***`), since they may hold a password or a token, and control characters
    escaped (shown())."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a URL that does not parse)"
    if not parts.scheme or not parts.netloc:
        return "(a URL that does not parse)"
    _, at, where = parts.netloc.rpartition("@")  # host and port as written, a port out of range too
    netloc = f"***@{where}" if at else where
    fields = (field.partition("=") for field in parts.query.split("&")) if parts.query else ()
    query = "&".join(f"{name}=***" if sign else "***" for name, sign, _ in fields)
    tail = (f"?{query}" if parts.query else "") + ("#***" if parts.fragment else "")
    return shown(f"{parts.scheme}://{netloc}{parts.path}{tail}")


def redacted(url: str) -> str:
    """`url` as the notifier logs it: without userinfo, query string or fragment, which may hold tokens."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{host_port(parts)}{parts.path}"
    except ValueError:
        return "(a URL that does not parse)"
