"""One reader of a model's results cache a host: the preprocess workers of a host share it
(docs/reuse.md).

A worker that reads all of cache.<model> into a store of its own makes every cached result cost
one read a worker, on the broker and in the worker: N workers on a GPU host (as many as its cores
allow, to feed the device) paid N reads of every result a job wrote, so a miss cost more the more
workers a host ran. Here the first worker of a host to look a model up reads its cache (`read()`:
preprocess_app/reuse.py CacheTails) and answers the other workers' lookups over a Unix socket;
they read nothing of the topic.

- Who reads: the worker that binds the socket's name first. The name is in Linux's abstract
  namespace, so it goes with its process (nothing is left behind by a SIGKILL) and a network
  namespace is a host; it is derived from the cluster, the namespace, the model and the user.
  Each end checks the other's user (SO_PEERCRED): another user's process cannot answer.
- Its failure is a miss, never an error: the reader gone (the connection closed) or answering
  nothing within ANSWER_TIMEOUT_S costs that lookup's records a recompute, and the next lookup
  elects again (this worker binds the name and reads, or asks the new reader). A reader that
  accepted but does not answer in time is given up for good: this worker reads the cache itself.
- Where abstract sockets are not to be had (another OS than Linux), each worker reads its own.

The wire: a lookup is a u32 count then that many 32-byte reuse keys; its answer a (u32 length,
bytes) each, NONE for a key not found.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from typing import BinaryIO, Protocol

from reuse.index import KEY_SIZE

log = logging.getLogger(__name__)

WIRE = 1  # raised with any change to the wire below or to the keys a reader looks up (reuse/keys.py)
NONE = 0xFFFFFFFF
MAX_KEYS = 1 << 16  # a lookup's keys at most (a longer one is asked in parts)
ANSWER_TIMEOUT_S = 30.0
ACCEPT_JOIN_S = 5.0
# the reader's first answer waits for its store to have read the cache (CacheTails' LOAD_WAIT_S)
FIRST_ANSWER_TIMEOUT_S = 90.0
_COUNT = struct.Struct("<I")
_PEER = struct.Struct("3i")  # struct ucred: pid, uid, gid


class Results(Protocol):
    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]: ...


def shared_name(cluster: str, namespace: str, model: str) -> bytes:
    """The abstract socket name of one model's cache reader for one cluster, namespace and user, in
    this version of the wire (WIRE): workers of two releases on one host during an upgrade, where
    the wire or the cache keys a reader computes for its askers changed, each ask their own."""
    digest = hashlib.blake2b(f"{cluster}\0{namespace}\0{model}\0{os.getuid()}".encode(), digest_size=16)
    return f"\0nearline-results-cache-{WIRE}-".encode() + digest.hexdigest().encode()


def host_results(name: bytes, what: str, read: Callable[[], Results]) -> Results:
    """A model's results as this worker looks them up: shared with the host's other workers where
    the OS has abstract sockets (HostResults), else `read()`, a reader of its own."""
    return HostResults(name, what, read) if sys.platform == "linux" else read()


class HostResults:
    """Lookups answered here (this worker reads the cache and serves the host) or by the host's
    reader, elected at the first lookup and again after a failure (module docstring)."""

    def __init__(self, name: bytes, what: str, read: Callable[[], Results]) -> None:
        """what: the cache's name in messages; read: opens a reader of the cache (waits until it
        has read what the topic held)."""
        self._name, self._what, self._read = name, what, read
        self._lock = threading.Lock()  # one lookup at a time on the connection; the election
        self._own: Results | None = None
        self._listener: socket.socket | None = None
        self._conn: socket.socket | None = None
        self._reader: BinaryIO | None = None  # the connection's buffered reading end
        self._answered = False  # the reader has answered on this connection (the first may wait for its load)
        self._told: set[str] = set()
        self._peers: set[socket.socket] = set()  # the workers this one answers
        self._accepting: threading.Thread | None = None

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        with self._lock:
            for _ in range(2):  # a reader gone since the last lookup: elected again at once
                if self._own is None and self._conn is None:
                    self._elect()
                if self._own is not None:
                    own = self._own
                    break
                if self._conn is None:
                    return [None] * len(keys)
                answers = self._ask(keys)
                if answers is not None:
                    return answers
            else:
                return [None] * len(keys)
        return own.get_many(keys)

    def close(self) -> None:
        """Stop serving and asking, as the worker's end does (a worker's caches live as long as it)."""
        with self._lock:
            self._hang_up()
            if self._listener is not None:
                # the accepting thread holds the socket, and so its name, until accept() returns
                with contextlib.suppress(OSError):
                    self._listener.shutdown(socket.SHUT_RDWR)
                if self._accepting is not None:
                    self._accepting.join(ACCEPT_JOIN_S)
                self._listener.close()
            self._listener = self._accepting = None
            for peer in list(self._peers):
                with contextlib.suppress(OSError):
                    peer.shutdown(socket.SHUT_RDWR)  # its thread closes it

    def _hang_up(self) -> None:
        if self._reader is not None:
            self._reader.close()  # the socket's file descriptor is closed with its last file
        if self._conn is not None:
            _shut(self._conn)
        self._conn = self._reader = None

    @property
    def serving(self) -> bool:
        """Whether this worker reads the cache and answers the host's other workers."""
        return self._listener is not None

    def _elect(self) -> None:
        """Ask the host's reader, or become it where there is none; a reader of another user is
        not asked: this worker then reads its own."""
        try:
            self._open_connection()
            log.info("%s: looked up in the host's reader of it (another preprocess worker)", self._what)
            return
        except (ConnectionRefusedError, FileNotFoundError):
            pass  # nobody serves it on this host
        except PermissionError as exc:
            log.warning("%s: %s; this worker reads it itself", self._what, exc)
            self._own = self._read()
            return
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self._name)
            listener.listen(64)
        except OSError as exc:  # another worker bound it meanwhile: asked, once it listens
            listener.close()
            try:
                self._open_connection()
            except OSError:
                self._fail(f"the host's reader of it is starting ({exc}); those records are computed")
            return
        own = self._read()
        self._own, self._listener = own, listener
        self._accepting = threading.Thread(target=self._serve, args=(listener, own), name="cache-share", daemon=True)
        self._accepting.start()
        log.info("%s: this worker reads it and answers the host's other preprocess workers", self._what)

    def _open_connection(self) -> None:
        self._conn, self._answered = _connect(self._name), False
        self._reader = self._conn.makefile("rb")

    def _ask(self, keys: Sequence[bytes]) -> list[bytes | None] | None:
        """The reader's answer; None where it failed (then the connection is closed, and a reader
        that answered nothing in time is replaced by one of this worker's own)."""
        conn, reader = self._conn, self._reader
        assert conn is not None and reader is not None
        if any(len(key) != KEY_SIZE for key in keys):  # as the store refuses one: the wire has no lengths
            raise ValueError(f"reuse keys are {KEY_SIZE} bytes each")
        answers: list[bytes | None] = []
        try:
            for start in range(0, len(keys), MAX_KEYS):
                part = keys[start : start + MAX_KEYS]
                conn.settimeout(ANSWER_TIMEOUT_S if self._answered else FIRST_ANSWER_TIMEOUT_S)
                conn.sendall(_COUNT.pack(len(part)) + b"".join(part))
                answers += _read_answer(reader, len(part))
                self._answered = True
            return answers
        except TimeoutError:
            waited = conn.gettimeout() or 0.0
            self._fail(f"the host's reader answered nothing within {waited:.0f} s; this worker reads it itself")
            self._own = self._read()
        except (OSError, ValueError) as exc:
            self._fail(f"the host's reader of it failed ({exc}); another is elected")
        return None

    def _fail(self, why: str) -> None:
        self._hang_up()
        if why not in self._told:
            self._told.add(why)
            log.warning("%s: %s", self._what, why)

    def _serve(self, listener: socket.socket, own: Results) -> None:
        """Accept the host's other workers while the listener is open, each on a thread of its own."""
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                theirs = _peer_uid(conn) == os.getuid()
            except OSError:  # gone already
                theirs = False
            if not theirs:
                _shut(conn)
                continue
            threading.Thread(target=self._answer, args=(conn, own), name="cache-share-peer", daemon=True).start()

    def _answer(self, conn: socket.socket, own: Results) -> None:
        """Answer one worker's lookups until it goes."""
        self._peers.add(conn)
        reader = conn.makefile("rb")
        try:
            while True:
                head = reader.read(_COUNT.size)
                if not head:
                    return  # the worker went
                (count,) = _COUNT.unpack(_exact(head, _COUNT.size))
                if count > MAX_KEYS:
                    raise ValueError(f"a lookup of {count} keys (at most {MAX_KEYS})")
                body = _exact(reader.read(count * KEY_SIZE), count * KEY_SIZE)
                keys = [body[i : i + KEY_SIZE] for i in range(0, len(body), KEY_SIZE)]
                try:
                    values = own.get_many(keys)
                except (OSError, ValueError) as exc:  # the store unreadable: every key missed
                    log.warning("%s: the results cache cannot be read, answering misses: %s", self._what, exc)
                    values = [None] * count
                conn.sendall(_answer_bytes(values))
        except (OSError, ValueError) as exc:
            log.debug("%s: a peer's lookups ended: %s", self._what, exc)
        finally:
            self._peers.discard(conn)
            reader.close()
            _shut(conn)


def _connect(name: bytes) -> socket.socket:
    """A connection to the reader bound to `name`; PermissionError where it is another user's."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(name)
        uid = _peer_uid(conn)
    except OSError:
        conn.close()
        raise
    if uid != os.getuid():
        _shut(conn)
        raise PermissionError(f"its host's reader is a process of user {uid}")
    return conn


def _peer_uid(conn: socket.socket) -> int:
    _, uid, _ = _PEER.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER.size))
    return int(uid)


def _answer_bytes(values: Sequence[bytes | None]) -> bytes:
    parts: list[bytes] = []
    for value in values:
        if value is None:
            parts.append(_COUNT.pack(NONE))
        else:
            parts += (_COUNT.pack(len(value)), value)
    return b"".join(parts)


def _read_answer(reader: BinaryIO, count: int) -> list[bytes | None]:
    values: list[bytes | None] = []
    for _ in range(count):
        (size,) = _COUNT.unpack(_exact(reader.read(_COUNT.size), _COUNT.size))
        values.append(None if size == NONE else _exact(reader.read(size), size))
    return values


def _exact(data: bytes, size: int) -> bytes:
    """`data`, read as `size` bytes; ValueError where the connection ended before them."""
    if len(data) != size:
        raise ValueError(f"the connection ended {len(data)} bytes into {size}")
    return data


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # not connected (a listener), or already gone
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
