"""After a lost connection, a consumer commits nothing until the broker says who it is; a broker that
came back without its state (a new cluster id) makes what was polled before uncommittable."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from gpu_consumer.ledger import Ledger
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import make_consumer
from kafka_io.incarnation import HELD_WARN_S, BrokerIncarnation
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from tests.support.waiting import wait_until


def settle(incarnation: BrokerIncarnation, consumer: Consumer, timeout_s: float = 30) -> None:
    """Poll (librdkafka's error callback runs in poll) until the incarnation is settled."""
    wait_until(
        lambda: incarnation.settled(consumer), timeout_s, "settled", every_s=0, meanwhile=lambda: consumer.poll(0.1)
    )


def poll_until_doubted(incarnation: BrokerIncarnation, consumer: Consumer, timeout_s: float = 30) -> None:
    wait_until(
        lambda: incarnation.doubting,
        timeout_s,
        "the lost connection reported",
        every_s=0,
        meanwhile=lambda: consumer.poll(0.1),
    )


@pytest.mark.process
def test_a_broker_restarted_without_its_state_makes_the_generation_polled_before_stale(tmp_path: Path) -> None:
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    incarnation = BrokerIncarnation()
    settings = KafkaSettings(broker.bootstrap_servers)
    ensure_topics(settings, [TopicSpec("incarnation")])
    consumer = make_consumer(settings, "incarnation-group", error_cb=incarnation.on_error)
    consumer.subscribe(["incarnation"])
    generation = 3
    incarnation.generation = lambda: generation
    try:
        settle(incarnation, consumer)
        first = incarnation.cluster_id
        assert first and incarnation.stale_through == -1
        broker.stop()
        poll_until_doubted(incarnation, consumer)
        assert not incarnation.settled(consumer)  # nobody answers: commit nothing
        broker = EmbeddedBroker.start(tmp_path / "broker2.log", port=broker.port)
        generation = 4  # a rejoin after the loss is a later generation: its windows stay committable
        settle(incarnation, consumer)
        assert incarnation.cluster_id not in (None, first)
        assert incarnation.stale_through == 3
    finally:
        consumer.close()
        broker.stop()


@pytest.mark.process
def test_a_broker_that_kept_its_state_through_an_outage_leaves_every_window_committable(tmp_path: Path) -> None:
    """A frozen broker (SIGSTOP) comes back as the same cluster: nothing is stale."""
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    incarnation = BrokerIncarnation()
    settings = KafkaSettings(broker.bootstrap_servers)
    ensure_topics(settings, [TopicSpec("incarnation")])
    consumer = make_consumer(
        settings, "incarnation-group", error_cb=incarnation.on_error, **{"socket.timeout.ms": 2000}
    )
    consumer.subscribe(["incarnation"])
    try:
        settle(incarnation, consumer)
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            poll_until_doubted(incarnation, consumer)
            assert not incarnation.settled(consumer)
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        settle(incarnation, consumer)
        assert incarnation.stale_through == -1
    finally:
        consumer.close()
        broker.stop()


def test_the_ledger_drops_the_offsets_of_stale_windows_and_commits_the_rest() -> None:
    ledger = Ledger()
    stale = ledger.open({("t", 0): 7}, 2, generation=3)
    fresh = ledger.open({("t", 0): 2, ("t", 1): 5}, 3, generation=4)
    for entry in (stale, fresh):
        ledger.seal(entry)
    assert ledger.take_committable(stale_through=3) == ({("t", 0): 2, ("t", 1): 5}, 3)
    assert ledger.in_flight() == 0


@pytest.mark.process
def test_commits_held_for_long_say_so_with_what_the_broker_answered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose commits wait on a broker that does not answer must not stall in silence."""
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    port = broker.port
    broker.stop()  # nobody answers on that port
    consumer = make_consumer(KafkaSettings(f"127.0.0.1:{port}"), "held-group")
    clock = [time.monotonic()]
    incarnation = BrokerIncarnation(clock=lambda: clock[0])  # at start the id is unknown: commits wait
    try:
        with caplog.at_level(logging.WARNING, logger="kafka_io.incarnation"):
            assert not incarnation.settled(consumer)
            assert not caplog.records  # a short wait is normal: said nothing
            clock[0] += HELD_WARN_S + 1
            assert not incarnation.settled(consumer)
        (record,) = caplog.records
        assert f"nothing committed for {HELD_WARN_S + 1:.0f} s" in record.getMessage()
        assert "has not answered a metadata request" in record.getMessage()
    finally:
        consumer.close()
