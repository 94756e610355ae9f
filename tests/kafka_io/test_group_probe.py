"""Consumer-group questions asked from a child process (kafka_io/group_probe.py): librdkafka aborts
a process whose coordinator-targeted admin requests timed out against a frozen broker once the
broker answers again (asked in the asking process itself, the first test's process dies of it,
SIGABRT), and the processes asking must ride outages out."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_io.broker import EmbeddedBroker
from kafka_io.group_probe import GroupProbe
from kafka_io.settings import KafkaSettings
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.process
@pytest.mark.timeout(180)
def test_group_questions_ride_out_a_frozen_broker_in_the_asking_process_and_are_answered_once_it_is_back(
    tmp_path: Path,
) -> None:
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    try:
        asks = subprocess.run(
            [sys.executable, "-m", "tests.support.frozen_group_asks", broker.bootstrap_servers, str(broker.pid), "12"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=150,
        )
    finally:
        os.kill(broker.pid, signal.SIGCONT)
        broker.kill()
    assert asks.returncode == 0, asks.stderr  # -6 (SIGABRT): the asking process itself died
    said = {k: v for line in asks.stdout.splitlines() for k, v in json.loads(line).items()}
    assert said["before"] == [[], 0]  # a group with no member, nothing committed: answered
    assert said["during"] and all(asked == [None, None] for asked in said["during"])  # unanswered, not "gone"
    assert said["after"][-1] == [[], 0], said  # answered again once the broker was back


def test_a_child_that_died_between_questions_is_replaced_and_its_death_logged(
    settings: KafkaSettings, caplog: pytest.LogCaptureFixture
) -> None:
    group = "probe-replaced"
    with GroupProbe(settings) as probe:
        # A just-started Kafka answers its first group questions NOT_COORDINATOR (and librdkafka
        # may then crash the child asking): unanswered until the coordinator is ready.
        answer = wait_until(
            lambda: probe.ask({"states": [group], "timeout_s": 5}, 10),
            120,
            "an answer from the group coordinator",
            until=lambda a: a is not None and a["answered"],
        )
        assert answer is not None and answer["states"][group] in (
            "EMPTY",
            "DEAD",
        )  # no member: Tansu says EMPTY, Kafka DEAD
        first = probe.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: probe.pid is None, 10, "the child's death seen")
        with caplog.at_level(logging.WARNING, logger="kafka_io.group_probe"):
            answer = probe.ask({"committed": group, "timeout_s": 5}, 10)
        assert answer == {"total": 0, "answered": True}  # asked of a new child
        assert probe.pid not in (None, first)
        assert "killed by SIGKILL" in caplog.text
