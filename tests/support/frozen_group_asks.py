"""Asks kafka_io.groups' questions of a broker before, during and after a freeze it makes itself
(SIGSTOP then SIGCONT of the broker's pid), and prints one JSON line per phase: what the asks
answered, and the warnings kafka_io logged. Run as a process of its own by
tests/kafka_io/test_group_probe.py: were the questions asked in this process, librdkafka's
abort after the freeze would take the test runner down with it."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time

from kafka_io.groups import answered_live_groups, committed_total
from kafka_io.settings import KafkaSettings

GROUP = "nobody-here"


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _asked(settings: KafkaSettings) -> list[object]:
    live = answered_live_groups(settings, [GROUP], timeout_s=2)
    return [None if live is None else sorted(live), committed_total(settings, GROUP, timeout_s=2)]


def main(bootstrap: str, broker_pid: int, freeze_s: float) -> None:
    # librdkafka drops a silent connection after socket.timeout.ms: at 5 s a short freeze is enough
    settings = KafkaSettings(bootstrap, extra={"socket.timeout.ms": "5000"})
    kept = _Kept()
    logging.getLogger("kafka_io").addHandler(kept)
    print(json.dumps({"before": _asked(settings)}), flush=True)
    os.kill(broker_pid, signal.SIGSTOP)
    during, frozen = [], time.monotonic()
    try:
        while time.monotonic() - frozen < freeze_s:
            during.append(_asked(settings))
    finally:
        os.kill(broker_pid, signal.SIGCONT)
    print(json.dumps({"during": during}), flush=True)
    after, resumed = [_asked(settings)], time.monotonic()
    # until answered, for as long as a question may take twice: a first child's start and a silent one
    while after[-1] != [[], 0] and time.monotonic() - resumed < 60:
        time.sleep(0.5)
        after.append(_asked(settings))
    print(json.dumps({"after": after, "warnings": kept.lines}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
