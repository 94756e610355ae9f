"""After a lost connection, a consumer commits nothing until the broker says who it is; a broker that
came back without its state (a new cluster id) makes what was polled before uncommittable."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from confluent_kafka import Consumer

from gpu_consumer.ledger import Ledger
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import make_consumer
from kafka_io.incarnation import BrokerIncarnation
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics


def settle(incarnation: BrokerIncarnation, consumer: Consumer, timeout_s: float = 30) -> None:
    """Poll (librdkafka's error callback runs in poll) until the incarnation is settled."""
    deadline = time.monotonic() + timeout_s
    while not incarnation.settled(consumer):
        assert time.monotonic() < deadline, "never settled"
        consumer.poll(0.1)


def poll_until_doubted(incarnation: BrokerIncarnation, consumer: Consumer, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not incarnation.doubting:
        assert time.monotonic() < deadline, "the lost connection was never reported"
        consumer.poll(0.1)


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
