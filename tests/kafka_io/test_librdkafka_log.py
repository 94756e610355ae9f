"""librdkafka's log lines, as kafka_io.clients passes them to Python logging: each cause once a minute."""

from __future__ import annotations

import logging
import uuid

import pytest


def test_a_reconnect_that_took_another_number_of_ms_is_the_same_line(caplog: pytest.LogCaptureFixture) -> None:
    import kafka_io.clients  # noqa: F401 (sets the filter up)

    host = f"{uuid.uuid4().hex}.invalid:9092"  # a line no other test logs: the filter's memory is per process
    failed = f"{host}/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused (after %dms in state CONNECT)"
    librdkafka = logging.getLogger("kafka_io.librdkafka")
    with caplog.at_level(logging.WARNING, logger="kafka_io.librdkafka"):
        for ms in (0, 2, 1, 0, 17):
            librdkafka.warning(failed, ms)
        librdkafka.warning(f"{host}/bootstrap: Disconnected (after 6782ms in state UP)")
    assert [r.getMessage() for r in caplog.records] == [
        failed % 0,
        f"{host}/bootstrap: Disconnected (after 6782ms in state UP)",
    ]
