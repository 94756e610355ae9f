"""One HTTP exchange under one deadline: resolve, connect to an address that passed the target
policy, send the POST, read the answer's head (and, for a refusal, the start of its body).

The deadline covers the whole exchange, not each socket read: a receiver that sends a header line
every few seconds, or one byte at a time, is cut when the deadline passes (a watchdog shuts the
socket down, which wakes the read). Name resolution runs on a thread of its own, since
getaddrinfo takes no timeout: one that hangs is abandoned at the deadline.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass

from jobs.notifications.targets import Address, TargetSettings, ip_of

Resolved = tuple[int, tuple[object, ...]]  # (address family, socket address), as getaddrinfo gives them

# The most of a refusing receiver's answer read: enough for a line of text, never a page.
BODY_BYTES_READ = 1024


class Unanswered(Exception):
    """No HTTP answer came: `detail` says why, for the notifier's own log."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotResolved(Unanswered):
    """The host has no address (the resolver's words in `detail`)."""


class Refused(Exception):
    """Every address the host resolves to is one the target policy refuses."""

    def __init__(self, address: Address, why: str) -> None:
        super().__init__(why)
        self.address, self.why = address, why


@dataclass(frozen=True)
class Request:
    """What to POST where: the URL's parts, the headers and the body."""

    tls: bool
    host: str  # as in the URL, for the Host header and TLS's server name
    port: int
    target: str  # path and query
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Reply:
    """A receiver's answer; the body's start only for a status that is not 2xx."""

    status: int
    reason: str
    location: str | None
    body_start: bytes
    address: Address  # where it came from


class Deadline:
    """An instant on the monotonic clock, and a watchdog that shuts down the socket it watches
    when the instant passes."""

    def __init__(self, timeout_s: float) -> None:
        self.at = time.monotonic() + timeout_s
        self.passed = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise Unanswered("the deadline passed")
        return left

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.passed:
                _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.passed = True
            if self._sock is not None:
                _shut(self._sock)

    def wait_out(self) -> None:
        time.sleep(max(0.0, self.at - time.monotonic()))

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    # socket.socket's own shutdown, also for a TLS socket: SSLSocket.shutdown would drop its TLS
    # state under the thread that is reading it.
    with contextlib.suppress(OSError):  # not connected yet, or already closed: the read ends either way
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def resolve(host: str, port: int, deadline: Deadline) -> list[Resolved]:
    """(family, socket address) of each address `host` resolves to, by the deadline."""
    found: list[Resolved] = []
    failed: list[OSError] = []
    done = threading.Event()

    def run() -> None:
        try:
            for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
                found.append((family, tuple(sockaddr)))
        except OSError as exc:
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="notify-resolve", daemon=True).start()
    if not done.wait(deadline.remaining()):
        raise Unanswered(f"resolving {host} took longer than the timeout")
    if failed:
        exc = failed[0]
        raise NotResolved(exc.strerror or str(exc) if isinstance(exc, socket.gaierror) else str(exc))
    return found


def permitted(addresses: list[Resolved], policy: TargetSettings) -> list[Resolved]:
    """The addresses the policy lets a POST reach, in the resolver's order; Refused if none."""
    allowed: list[Resolved] = []
    first_refused: tuple[Address, str] | None = None
    for family, sockaddr in addresses:
        address = ip_of(str(sockaddr[0]))
        why = policy.refusal(address)
        if why is None:
            allowed.append((family, sockaddr))
        elif first_refused is None:
            first_refused = address, why
    if not allowed and first_refused is not None:
        raise Refused(*first_refused)
    return allowed


class _Pinned(http.client.HTTPConnection):
    """A connection to one resolved address (the one the policy passed), not to the host name."""

    def __init__(self, request: Request, sockaddr: Resolved, deadline: Deadline) -> None:
        super().__init__(request.host, request.port, timeout=deadline.remaining())
        self._sockaddr, self._deadline = sockaddr, deadline

    def connect(self) -> None:
        self.sock = _connect(self._sockaddr, self._deadline)


class _PinnedTLS(http.client.HTTPSConnection):
    def __init__(self, request: Request, sockaddr: Resolved, deadline: Deadline) -> None:
        super().__init__(request.host, request.port, timeout=deadline.remaining())
        self._sockaddr, self._deadline = sockaddr, deadline

    def connect(self) -> None:
        raw = _connect(self._sockaddr, self._deadline)
        wrapped = ssl.create_default_context().wrap_socket(
            raw, server_hostname=self.host, do_handshake_on_connect=False
        )
        self._deadline.watch(wrapped)  # the handshake too is cut at the deadline
        try:
            wrapped.do_handshake()
        except BaseException:
            wrapped.close()
            raise
        self.sock = wrapped


def _connect(sockaddr: Resolved, deadline: Deadline) -> socket.socket:
    family, address = sockaddr
    sock = socket.socket(family, socket.SOCK_STREAM)
    deadline.watch(sock)
    sock.settimeout(deadline.remaining())
    try:
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def exchange(request: Request, policy: TargetSettings, timeout_s: float) -> Reply:
    """POST once within `timeout_s`, all told. Raises NotResolved, Refused (nothing was sent) or
    Unanswered (no complete answer head came in time)."""
    deadline = Deadline(timeout_s)
    try:
        candidates = permitted(resolve(request.host, request.port, deadline), policy)
        try:
            return _first_answer(request, candidates, deadline)
        except Unanswered:
            if not any(policy.explicitly_allowed(ip_of(str(sockaddr[0]))) for _, sockaddr in candidates):
                # A refused port would fail at once and a silent one at the deadline: the time of
                # the attempt, which status shows, would tell them apart where the message does not.
                deadline.wait_out()
            raise
    finally:
        deadline.cancel()


def _first_answer(request: Request, candidates: list[Resolved], deadline: Deadline) -> Reply:
    """The answer of the first address that takes the connection."""
    try:
        last: Exception | None = None
        for sockaddr in candidates:  # the next address only when this one took no connection
            kind = _PinnedTLS if request.tls else _Pinned
            connection = kind(request, sockaddr, deadline)
            try:
                connection.connect()
            except OSError as exc:
                connection.close()
                last = exc
                continue
            try:
                return _post(connection, request, ip_of(str(sockaddr[1][0])), deadline)
            finally:
                connection.close()
        raise Unanswered(_why(last, deadline))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise Unanswered(_why(exc, deadline)) from None


def _post(connection: http.client.HTTPConnection, request: Request, address: Address, deadline: Deadline) -> Reply:
    connection.request("POST", request.target, body=request.body, headers=request.headers)
    response = connection.getresponse()
    if deadline.passed:  # the watchdog's shutdown reads as the end of the head: the head was cut
        raise Unanswered("no complete answer before the deadline")
    body_start = b""
    if not 200 <= response.status < 300:
        try:
            body_start = response.read(BODY_BYTES_READ)
        except (OSError, http.client.HTTPException):
            body_start = b""  # the status is the answer; its text is a courtesy
    return Reply(response.status, response.reason, response.getheader("Location"), body_start, address)


def _why(exc: BaseException | None, deadline: Deadline) -> str:
    """The cause of no answer, in words for the operator's log."""
    if deadline.passed or isinstance(exc, TimeoutError):
        return "no complete answer before the deadline"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed: {exc.reason or exc}"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "closed the connection without an answer"
    if isinstance(exc, http.client.HTTPException):
        return f"not an HTTP answer: {type(exc).__name__}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}" if exc is not None else "no address took a connection"
