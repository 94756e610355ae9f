"""The preprocess worker's log in a broker outage: one line per cause a minute, and one that says what it waits for.

aiokafka logs every failed reconnect, metadata refresh, fetch and coordinator lookup, each at
ERROR: a 2-minute outage writes thousands of lines, which bury the one thing an operator
needs to know, that the worker is waiting and loses nothing. librdkafka's lines (kafka_io.clients)
have their own once-a-minute filter.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from kafka_io.clients import refusal
from kafka_io.faust_auth import faust_refusal
from kafka_io.settings import KafkaSettings

# loggers of the libraries faust runs on; ours (preprocess_app, kafka_io) pass untouched
NOISY = ("aiokafka", "faust", "mode")

# aiokafka's templates that mean no broker could be reached (aiokafka/client.py)
UNREACHABLE = frozenset({"Unable connect to node with id %s: %s", "Unable to update metadata from %s"})

WINDOW_S = 60.0

# Since this long without an unreachable line, a broker that takes connections again is back
QUIET_S = 5.0

log = logging.getLogger(__name__)


@dataclass
class BrokerWait:
    """Whether the worker is waiting for the broker, as its client libraries' log lines tell."""

    settings: KafkaSettings
    since: float | None = None  # time.monotonic() of the first unreachable line of this outage
    last: float = 0.0  # time.monotonic() of the latest one
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def unreachable(self) -> None:
        now = time.monotonic()
        with self._lock:
            self.last = now
            if self.since is not None:
                return
            self.since = now
        log.warning(
            "Kafka at %s unreachable, waiting for it; records are kept (what was not acked is read again)",
            self.settings.bootstrap_servers,
        )

    def check_back(self) -> None:
        """Blocking (a connect to the bootstrap address): end the outage once the broker takes
        connections again and the libraries have stopped failing."""
        if self.since is not None and refusal(self.settings) is None:
            self.answers()

    def answers(self) -> None:
        now = time.monotonic()
        with self._lock:
            if self.since is None or now - self.last < QUIET_S:
                return
            waited, self.since = now - self.since, None
        log.warning("Kafka at %s answers again after %.0f s; resuming", self.settings.bootstrap_servers, waited)

    @property
    def waiting(self) -> bool:
        return self.since is not None


class OncePerCause(logging.Filter):
    """The first record of each (logger, message template) of the noisy libraries passes; then one a
    minute, which says how many like it were held back. Put on the root logger's handlers: a filter
    on a logger does not see what its children log."""

    def __init__(self, wait: BrokerWait) -> None:
        super().__init__()
        self._wait = wait
        self._last: dict[tuple[str, str], float] = {}  # when a record of the cause last passed
        self._held: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()  # aiokafka logs on the loop, librdkafka's callbacks on threads

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and faust_refusal(record.exc_info[1], "") is not None:
            # Kafka said no (a login, an ACL, TLS): the worker says so in one line and exits with
            # the refusal's code; a traceback of it (faust's crash, asyncio's task) says nothing more
            record.exc_info, record.exc_text = None, None
        if not record.name.startswith(NOISY) or record.name.startswith("faust.worker"):
            return True
        template = str(record.msg)
        if record.name.startswith("aiokafka") and template in UNREACHABLE:
            self._wait.unreachable()
        key = (record.name, template)
        with self._lock:
            last = self._last.get(key)
            if last is not None and record.created - last < WINDOW_S:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            if len(self._last) >= 1000:  # a worker runs for months: forget causes older than the window
                self._last = {k: t for k, t in self._last.items() if record.created - t < WINDOW_S}
            self._last[key] = record.created
            held = self._held.pop(key, 0)
        if held:
            record.msg = f"{template} ({held} more like this since the last such line)"
        return True


def quiet_root_handlers(quiet: OncePerCause) -> None:
    """Filter every handler of the root logger (call once faust's worker has set logging up)."""
    for handler in logging.getLogger().handlers:
        if quiet not in handler.filters:
            handler.addFilter(quiet)
