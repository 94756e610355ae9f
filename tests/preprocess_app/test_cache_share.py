"""One reader of a model's results cache a host (preprocess_app/cache_share.py), broker-free: the
first worker to look up reads the cache and answers the others over the host's socket; a reader
gone is replaced at the next lookup, one that does not answer makes the asker read its own, one of
another user is never asked; a lookup longer than a request's limit, and large values, come back
whole."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence

import pytest

from preprocess_app import cache_share
from preprocess_app.cache_share import HostResults


class Store:
    """A reader's store: a dict, and how often it was opened and asked."""

    def __init__(self, values: dict[bytes, bytes]) -> None:
        self.values, self.asked = values, 0

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        self.asked += 1
        return [self.values.get(k) for k in keys]


class Opened:
    """read() for HostResults: the store, counting the readers opened."""

    def __init__(self, store: Store) -> None:
        self.store, self.opened = store, 0

    def __call__(self) -> Store:
        self.opened += 1
        return self.store


def key(n: int) -> bytes:
    return n.to_bytes(32, "big")


@pytest.fixture
def name() -> bytes:
    return b"\0nearline-test-" + uuid.uuid4().hex.encode()


@pytest.fixture
def hosts() -> Iterator[list[HostResults]]:
    made: list[HostResults] = []
    yield made
    for results in made:
        results.close()


def test_the_first_worker_reads_and_answers_the_others_who_read_nothing(name: bytes, hosts: list[HostResults]) -> None:
    first, second = Opened(Store({key(1): b"one", key(2): b"two"})), Opened(Store({}))
    a, b = HostResults(name, "cache.m", first), HostResults(name, "cache.m", second)
    hosts += (a, b)
    assert a.get_many([key(1), key(3)]) == [b"one", None]
    assert b.get_many([key(2), key(3), key(1)]) == [b"two", None, b"one"]
    assert b.get_many([]) == []
    with pytest.raises(ValueError, match="32 bytes"):  # as a store of its own would refuse it
        b.get_many([key(1)[:31]])
    assert b.get_many([key(1)]) == [b"one"]  # and the connection goes on
    assert (first.opened, second.opened) == (1, 0)
    assert first.store.asked == 3 and a.serving and not b.serving


def test_a_reader_gone_is_replaced_at_the_next_lookup_by_the_worker_that_asks(
    name: bytes, hosts: list[HostResults]
) -> None:
    first, second = Opened(Store({key(1): b"from a"})), Opened(Store({key(1): b"from b"}))
    a, b = HostResults(name, "cache.m", first), HostResults(name, "cache.m", second)
    hosts += (a, b)
    assert a.get_many([key(1)]) == [b"from a"]
    assert b.get_many([key(1)]) == [b"from a"]
    a.close()
    assert b.get_many([key(1)]) == [b"from b"]  # the lookup itself elected b, and b read its own
    assert b.serving and second.opened == 1
    c = HostResults(name, "cache.m", Opened(Store({})))
    hosts.append(c)
    assert c.get_many([key(1)]) == [b"from b"]


def test_a_reader_that_answers_nothing_in_time_makes_the_asker_read_its_own(
    name: bytes, hosts: list[HostResults], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_share, "FIRST_ANSWER_TIMEOUT_S", 0.5)
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # listens, never accepts
    mute.bind(name)
    mute.listen(4)
    try:
        own = Opened(Store({key(1): b"own"}))
        b = HostResults(name, "cache.m", own)
        hosts.append(b)
        started = time.monotonic()
        assert b.get_many([key(1)]) == [b"own"]
        assert time.monotonic() - started < 10
        assert own.opened == 1 and not b.serving
        assert b.get_many([key(1)]) == [b"own"] and own.opened == 1
    finally:
        mute.close()


def test_a_reader_of_another_user_is_never_asked(
    name: bytes, hosts: list[HostResults], monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = HostResults(name, "cache.m", Opened(Store({key(1): b"theirs"})))
    hosts.append(theirs)
    assert theirs.get_many([key(1)]) == [b"theirs"]
    uid = os.getuid()
    monkeypatch.setattr(cache_share.os, "getuid", lambda: uid + 1)  # this worker is another user
    own = Opened(Store({key(1): b"own"}))
    b = HostResults(name, "cache.m", own)
    hosts.append(b)
    assert b.get_many([key(1)]) == [b"own"]
    assert own.opened == 1 and not b.serving


def test_a_lookup_past_a_requests_limit_and_large_values_come_back_whole(
    name: bytes, hosts: list[HostResults], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_share, "MAX_KEYS", 100)
    big = os.urandom(3 << 20)
    values = {key(n): f"value {n}".encode() for n in range(0, 250, 2)} | {key(7): big}
    a, b = HostResults(name, "cache.m", Opened(Store(values))), HostResults(name, "cache.m", Opened(Store({})))
    hosts += (a, b)
    a.get_many([])
    asked = [key(n) for n in range(250)]
    assert b.get_many(asked) == [values.get(k) for k in asked]


def test_the_name_is_abstract_and_one_a_cluster_namespace_model_user_and_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    name = cache_share.shared_name("k:9092", "ns", "minilm")
    assert name.startswith(b"\0nearline-results-cache-1-")  # abstract: no file, gone with its process
    others = {
        cache_share.shared_name("k:9093", "ns", "minilm"),
        cache_share.shared_name("k:9092", "other", "minilm"),
        cache_share.shared_name("k:9092", "ns", "e5"),
    }
    uid = os.getuid()
    monkeypatch.setattr(cache_share.os, "getuid", lambda: uid + 1)
    others.add(cache_share.shared_name("k:9092", "ns", "minilm"))
    monkeypatch.setattr(cache_share, "WIRE", 2)
    monkeypatch.setattr(cache_share.os, "getuid", lambda: uid)
    others.add(cache_share.shared_name("k:9092", "ns", "minilm"))
    assert name not in others and len(others) == 5
