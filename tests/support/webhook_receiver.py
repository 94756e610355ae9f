"""A loopback webhook receiver (http.server in a thread): it records every POST, answers each path
with the statuses it is told to (then 200), and can hold a path's answers until the test ends;
a dribbling receiver (a raw socket server that answers `200 OK` and then one header line at a
time, never ending its answer); and an address where nothing listens."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.waiting import wait_until as wait_until  # its callers' import, kept: the one helper is there


@dataclass(frozen=True)
class Post:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered


@dataclass
class Receiver:
    port: int = 0
    posts: list[Post] = field(default_factory=list)
    answers: dict[str, list[int]] = field(default_factory=dict)  # path -> statuses to answer first, in order
    hold: set[str] = field(default_factory=set)  # paths answered only when the test ends
    texts: dict[str, bytes] = field(default_factory=dict)  # path -> the text of its refusals
    released: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def to(self, path: str) -> list[Post]:
        with self.lock:
            return [p for p in self.posts if p.path == path]

    def answer(self, path: str, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            queued = self.answers.get(path) or []
            status = queued.pop(0) if queued else 200
            self.posts.append(Post(path, headers, body, status))
            return status


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path in state.hold:
                state.released.wait(30)
                return
            status = state.answer(self.path, dict(self.headers.items()), body)
            reply = state.texts.get(self.path, b"busy, try later") if status >= 300 else b"ok"
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", "http://127.0.0.1:1/elsewhere")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: object) -> None:
            return  # the test asserts on what came, not on the server's log

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.released.set()
        server.shutdown()
        server.server_close()


@dataclass
class Dribbler:
    """A receiver that starts every answer and never finishes it: `HTTP/1.1 200 OK`, then a header
    line every `every_s` for as long as the client stays. It records how long each connection
    lasted and the most it held open at once."""

    every_s: float = 0.5
    port: int = 0
    open_now: int = 0
    most_open: int = 0
    durations: list[float] = field(default_factory=list)  # seconds, per ended connection
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def serve(self, conn: socket.socket) -> None:
        started = time.monotonic()
        with self.lock:
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
        try:
            conn.settimeout(5)
            conn.recv(65536)  # the request's start: enough to answer
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            n = 0
            while not self.stop.is_set():
                readable, _, _ = select.select([conn], [], [], self.every_s)
                if readable and not conn.recv(65536):
                    return  # the client hung up (seen at once, so the counts are exact)
                n += 1
                conn.sendall(f"X-Slow-{n}: still coming\r\n".encode())
        except OSError:
            pass  # the client hung up: what the test waits for
        finally:
            conn.close()
            with self.lock:
                self.open_now -= 1
                self.durations.append(time.monotonic() - started)


@pytest.fixture
def dribbler() -> Iterator[Dribbler]:
    state = Dribbler()
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    state.port = server.getsockname()[1]

    def accept() -> None:
        while not state.stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=state.serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        thread.join(5)
        server.close()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound, never listening, until the test ends."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]
