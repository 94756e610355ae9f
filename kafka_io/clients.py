"""Producer, consumer and admin factories: house defaults, then caller extras, then what must not change.

`Consumer` and `Producer` are the client handles these factories make. Outside kafka_io they are
opaque: held, passed to kafka_io functions and closed with them, never called directly.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kafka_io.errors import (
    BrokerUnavailableError,
    GroupProtocolError,
    KafkaRefusedError,
    KafkaTlsError,
    SecuritySettingsError,
    refused_error,
)
from kafka_io.limits import MAX_RECORD_BYTES
from kafka_io.settings import KafkaSettings

PRODUCER_DEFAULTS: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "message.max.bytes": MAX_RECORD_BYTES,
    # faust/aiokafka and the Java client hash keys with murmur2; librdkafka's default (crc32)
    # would put the same key on another partition than the other clients do.
    "partitioner": "murmur2_random",
}
PRODUCER_FIXED: dict[str, Any] = {"acks": "all"}

CONSUMER_DEFAULTS: dict[str, Any] = {
    # Join and failover in seconds, not the minute the 45 s default costs (docs/brokers.md).
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "partition.assignment.strategy": "range",
    "auto.offset.reset": "earliest",
    # never see records of open or aborted transactions (exactly-once mode's outputs)
    "isolation.level": "read_committed",
    "fetch.max.bytes": 4 * MAX_RECORD_BYTES,
    "receive.message.max.bytes": 4 * MAX_RECORD_BYTES + 1_000_000,
    "max.partition.fetch.bytes": MAX_RECORD_BYTES,
    # notice a subscribed topic that appears (or reappears after a broker lost it) in seconds
    "topic.metadata.refresh.interval.ms": 5000,
    # How long the broker may hold a fetch that found nothing. Tansu does not answer a held fetch
    # when records arrive: at librdkafka's 500 ms an idle consumer saw a new record 117 ms later
    # (p50; up to the whole wait), at 100 ms 17 ms later (bench/fetch_latency.py). An idle
    # consumer then sends ten empty fetches a second; a busy one never waits.
    "fetch.wait.max.ms": 100,
}
# Kafka 4's consumer group protocol (KIP-848) takes the session, the heartbeat and the assignment
# to the broker (group.consumer.*): librdkafka refuses a consumer that sets them ("not supported
# for group.protocol=consumer ... defined broker side").
GROUP_PROTOCOLS = ("classic", "consumer")
CLASSIC_ONLY = ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy")
# A metadata request that names a missing topic must not let the broker create it: Kafka
# (auto.create.topics.enable, its default) makes it with one partition, a 1 MB record limit and no
# compaction, Tansu with 4 partitions, and the first submit then refused it. Only ensure_topics
# (kafka_io/topics.py) creates topics. librdkafka's consumers default to this; an admin client,
# a producer underneath, asks for auto-creation unless told not to. Kafka and Tansu both obey it.
NO_AUTO_CREATE: dict[str, Any] = {"allow.auto.create.topics": False}
# Offsets move only when the application says its outputs are stored; EOF is the caught-up signal.
CONSUMER_FIXED: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    **NO_AUTO_CREATE,
}


_AFTER = re.compile(r" \(after \d+ms in state \w+\)")


class _OncePerMinute(logging.Filter):
    """librdkafka repeats a failing connection's line at every reconnect: 292 lines in the 15 s a
    command waits on a broker that is down, before its one-line error. Each distinct line passes
    once a minute. The time a connection took ("after 2ms in state CONNECT") is not part of the
    line's identity: with it, each reconnect of a worker in an outage was a line of its own."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[object, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, _AFTER.sub("", record.getMessage()))
        last = self._last.get(key)
        if last is not None and record.created - last < 60:
            return False
        if len(self._last) >= 1000:  # a worker runs for months: forget lines older than the minute
            self._last = {k: t for k, t in self._last.items() if record.created - t < 60}
        self._last[key] = record.created
        return True


# librdkafka's own log lines (it wrote them to stderr), through Python logging: its informational
# lines (a consumer closing with events unserved) stay below the CLI's WARNING level
_librdkafka = logging.getLogger("kafka_io.librdkafka")
_librdkafka.addFilter(_OncePerMinute())


def log_error(err: KafkaError) -> None:
    # librdkafka retries transport errors by itself; these are worth a line, not an exception,
    # and like its log lines they repeat at every reconnect: the same filter lets each through
    # once a minute.
    _librdkafka.warning("kafka: %s", err)


# The refusals (a login, a TLS handshake) the clients' error callbacks have reported, per cluster
# and principal, with when: a wait on that cluster raises the refusal instead of waiting out its
# timeout. librdkafka retries a refused login like a dropped connection, and a request in flight
# meanwhile ends as a timeout that names neither (a wrong password read as "did not answer
# within 15 s"). One older than REFUSAL_MEMORY_S is forgotten: a worker's later timeout is then
# an outage again, not a login refused once during a broker's restart.
# Kept as the error's class and words, never the raised error itself: that would keep its
# traceback's frames, and the client in them, alive until the interpreter's teardown, where
# librdkafka's destruction of a client still retrying its login crashed the process (SIGSEGV
# after the error line, instead of the exit code).
_refused: dict[tuple[str, str], tuple[float, type[KafkaRefusedError], str]] = {}
REFUSAL_MEMORY_S = 60.0
# The principal of the last client made: the one a consumed event's refusal names. A process logs
# in as one principal (NEARLINE_KAFKA_*), whichever clients it makes.
_principal = ["User:ANONYMOUS"]


def _login(settings: KafkaSettings) -> tuple[str, str]:
    return (settings.bootstrap_servers, settings.principal)


def _error_watch(settings: KafkaSettings) -> Callable[[KafkaError], None]:
    """A client's error_cb: logs each error (log_error) and keeps the refusal it says, if any. A
    plain closure, not a callable object: confluent-kafka's callbacks are fragile (produce.py)."""
    login = _login(settings)

    def on_error(err: KafkaError) -> None:
        refused = refused_error(err, login[1])
        if refused is None:
            log_error(err)
        else:  # said by the wait that raises it; librdkafka's own line (once a minute) says it meanwhile
            _refused[login] = (time.monotonic(), type(refused), str(refused))

    return on_error


def refused_login(settings: KafkaSettings) -> KafkaRefusedError | None:
    """The refusal a client of these settings was told in the last REFUSAL_MEMORY_S, if any."""
    told = _refused.get(_login(settings))
    if told is None or time.monotonic() - told[0] > REFUSAL_MEMORY_S:
        return None
    return told[1](told[2])


def current_principal() -> str:
    """Who this process's clients log in as (KafkaSettings.principal of the last client made)."""
    return _principal[0]


def as_refusal(error: KafkaError | BaseException, operation: str = "", resource: str = "") -> KafkaRefusedError | None:
    """The refusal a client call's error (a KafkaError, or the KafkaException carrying one) says:
    KafkaRefusedError naming this process's principal, and `operation` on `resource` where the
    caller knows them; None for any other error."""
    if isinstance(error, BaseException) and not isinstance(error, KafkaException):
        error = error.__cause__ or error  # our DeliveryError raised from the client's exception
    err = error.args[0] if isinstance(error, KafkaException) and error.args else error
    if not isinstance(err, KafkaError):
        return None
    return refused_error(err, current_principal(), operation=operation, resource=resource)


def _base(settings: KafkaSettings) -> dict[str, Any]:
    if not settings.bootstrap_servers:
        raise BrokerUnavailableError("no bootstrap servers configured (set NEARLINE_BOOTSTRAP_SERVERS)")
    _principal[0] = settings.principal
    return {
        "bootstrap.servers": settings.bootstrap_servers,
        "client.id": settings.client_id,
        "error_cb": _error_watch(settings),
        "logger": _librdkafka,
        **settings.extra,
    }


Client = TypeVar("Client", Producer, Consumer, AdminClient)


def _made(factory: Callable[[dict[str, Any]], Client], config: dict[str, Any]) -> Client:
    """factory(config), or the reason its security settings cannot be used, in a line: librdkafka
    checks the TLS files when a client is made (a CA file that is not one, a key its
    ssl.key.password does not open) and raised a bare KafkaException, a traceback at the CLI."""
    try:
        return factory(config)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        text = err.str() if isinstance(err, KafkaError) else str(exc)
        if not isinstance(err, KafkaError) or err.code() != KafkaError._INVALID_ARG:
            raise
        if "ssl." in text:
            raise KafkaTlsError(f"the TLS settings (NEARLINE_KAFKA_SSL_*) cannot be used: {text}") from None
        if "sasl." in text or "security.protocol" in text:
            raise SecuritySettingsError(f"the NEARLINE_KAFKA_* security settings cannot be used: {text}") from None
        raise


def make_producer(settings: KafkaSettings, *, idempotent: bool = True, **extra: Any) -> Producer:
    """A producer that waits for every replica (acks=all).

    Idempotent by default, so a retried batch is never written twice. A fresh idempotent producer
    sends nothing until librdkafka's producer-id timer fires, 0.5-1.0 s after it is made (measured
    on Tansu: first delivery at 503 or 1004 ms, against 2 ms without). A short-lived producer on a
    latency path whose duplicates every reader drops (records keyed by job and sequence) may opt
    out with idempotent=False.
    """
    fixed = {**PRODUCER_FIXED, "enable.idempotence": idempotent}
    return _made(Producer, {**PRODUCER_DEFAULTS, **_base(settings), **extra, **fixed})


def make_consumer(settings: KafkaSettings, group_id: str, **extra: Any) -> Consumer:
    """`extra` may ask for Kafka 4's consumer group protocol ("group.protocol": "consumer", KIP-848:
    the broker assigns and moves partitions one at a time; check_group_protocol says whether it
    can): the defaults the broker then decides are left out."""
    defaults = CONSUMER_DEFAULTS
    if extra.get("group.protocol") == "consumer":
        defaults = {k: v for k, v in CONSUMER_DEFAULTS.items() if k not in CLASSIC_ONLY}
        # The broker assigns; its default assignor (uniform) balances partition counts over all
        # the topics of a subscription: of two workers on a model's two lanes (4 partitions
        # each), one got the whole bulk lane and the other the whole live lane, idle through
        # every batch job (the trial of two GPU workers). Range, as on the classic protocol,
        # splits each topic over the members. Kafka's group.consumer.assignors has it by default.
        defaults["group.remote.assignor"] = "range"
    return _made(Consumer, {**defaults, **_base(settings), "group.id": group_id, **extra, **CONSUMER_FIXED})


def make_admin(settings: KafkaSettings) -> AdminClient:
    return _made(AdminClient, {**_base(settings), **NO_AUTO_CREATE})


def check_reachable(settings: KafkaSettings, timeout_s: float = 10.0) -> None:
    """Fail fast, naming the servers, instead of letting a command wait on a dead cluster: at once
    where nothing listens, else after timeout_s; a refused login or TLS handshake as soon as told."""
    _check_listening(settings)
    _answered(make_admin(settings), settings, timeout_s)


# How long one metadata request of a reachability check may wait before the client's error
# callbacks are served: a refused login or TLS handshake is reported there, and said that soon.
ANSWER_SLICE_S = 1.0


def _answered(admin: AdminClient, settings: KafkaSettings, timeout_s: float) -> None:
    """BrokerUnavailableError unless the cluster answers admin's metadata request within
    timeout_s; the refusal (KafkaRefusedError) as soon as the client is told one."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=max(0.05, min(ANSWER_SLICE_S, deadline - time.monotonic())))
            _refused.pop(_login(settings), None)
            return
        except KafkaException as exc:
            why = str(exc.args[0])
        admin.poll(0)  # the error callbacks: a refusal is reported there, never by list_topics
        refused = refused_login(settings)
        if refused is not None or time.monotonic() >= deadline:
            break
    # The client goes now, not with the raised error's frames at the interpreter's exit, where
    # librdkafka's teardown of a client still retrying a refused login crashed the process.
    del admin
    if refused is not None:
        raise refused
    raise BrokerUnavailableError(
        f"Kafka at {settings.bootstrap_servers} did not answer within {timeout_s:.0f} s: {why}"
    )


def unanswered(settings: KafkaSettings, what: str, exc: KafkaException) -> Exception:
    """What to raise for a request of these settings that got no answer (`what`: the request and
    its wait): the refusal the clients were told, where there was one, else BrokerUnavailableError."""
    refused = refused_login(settings)
    if refused is not None:
        return refused
    return BrokerUnavailableError(f"Kafka at {settings.bootstrap_servers} {what}: {exc.args[0]}")


def check_login(settings: KafkaSettings, timeout_s: float = 15.0) -> None:
    """Where NEARLINE_KAFKA_* asks for TLS or SASL, one metadata request, so that a refused login
    or TLS handshake is said at once (KafkaRefusedError), before a command's first real request
    would wait out its timeout; nothing to ask on a plaintext connection."""
    if str(settings.extra.get("security.protocol", "PLAINTEXT")).upper() != "PLAINTEXT":
        _answered(make_admin(settings), settings, timeout_s)


class _Lines:
    """A librdkafka `logger` that keeps its lines (the client calls log(level, format, *args))."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level: int, fmt: str, *args: object) -> None:
        self.lines.append(fmt % args)


def check_group_protocol(settings: KafkaSettings, protocol: str, timeout_s: float = 10.0) -> None:
    """GroupProtocolError unless the brokers offer `protocol`. The classic one every broker does;
    Kafka 4's consumer protocol only a broker that answers ConsumerGroupHeartbeat (KIP-848). A
    consumer of that protocol on a broker without it never joins and says nothing (Tansu 0.6.0: no
    error, no assignment), so it is asked at start: librdkafka judges each broker's ApiVersions,
    and says so in a debug line ("Enabling feature BrokerBalancedConsumer", or "Disabling").
    Where it says neither (another librdkafka's wording), the worker starts and a warning says
    the protocol was not checked."""
    if protocol == "classic":
        return
    capture = _Lines()
    config: dict[str, Any] = {**_base(settings), "logger": capture, "debug": "feature"}
    admin = _made(AdminClient, config)
    _answered(admin, settings, timeout_s)
    for _ in range(100):  # the log lines come through the client's queue: serve what is there
        if not admin.poll(0.05):
            break
    said = [line for line in capture.lines if "feature BrokerBalancedConsumer" in line]
    if any("Disabling feature" in line for line in said):
        raise GroupProtocolError(
            f"Kafka at {settings.bootstrap_servers} does not offer the consumer group protocol "
            "(KIP-848: no ConsumerGroupHeartbeat in its ApiVersions; Apache Kafka 4.0+ has it): "
            "run with --group-protocol classic"
        )
    if not any("Enabling feature" in line for line in said):
        _librdkafka.warning(
            "could not tell whether Kafka at %s offers the consumer group protocol (KIP-848); "
            "a consumer that never gets partitions may need --group-protocol classic",
            settings.bootstrap_servers,
        )


def refusal(settings: KafkaSettings, timeout_s: float = 1.0) -> str | None:
    """Why no bootstrap server can be reached, when that is known at once: every address refused
    the connection (nothing listens there) or names no host. librdkafka retries those until its
    request times out (15 s before a command said so). None when any address takes the connection,
    or one is only slow: a slow or cut network is for the client's own timeouts to judge."""
    reasons = []
    for server in settings.bootstrap_servers.split(","):
        address = server.strip().rpartition("://")[2]  # SSL://host:9093 and host:9093 alike
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            return None  # a form this does not parse: leave it to the client
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return None
        except ConnectionRefusedError:
            reasons.append(f"{address} refused the connection")
        except socket.gaierror:
            reasons.append(f"{host} is not a known host name")
        except OSError:
            return None
    return "; ".join(reasons) or None


def check_not_refused(settings: KafkaSettings) -> None:
    """BrokerUnavailableError at once when refusal() knows the servers cannot be reached; the
    refusal of a secured cluster's login or TLS handshake as soon as it is told (check_login)."""
    _check_listening(settings)
    check_login(settings)


def _check_listening(settings: KafkaSettings) -> None:
    reason = refusal(settings)
    if reason is not None:
        raise BrokerUnavailableError(
            f"Kafka at {settings.bootstrap_servers} cannot be reached: {reason}. Start the broker there, or "
            "name a running one (--bootstrap-servers / NEARLINE_BOOTSTRAP_SERVERS)"
        )


def close_consumer(consumer: Consumer) -> None:
    """Leave the group now (its partitions move at once, not after the session timeout) and close."""
    consumer.close()
