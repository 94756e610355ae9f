"""One `dlq replay` at a time per dead-letter topic: a claim appended to a log, read back.

Two replays started together each read the dead-letter topic before either had marked what it
put back, and both replayed every letter. A replay now appends a claim to `dlq.replays` and reads
that log (the one partition its key lands on) up to its own claim: it goes on once every claim
before its own is released or has lapsed, reads the dead letters then (the earlier run's marks
included: its release is written only after its replays and marks are confirmed), and releases
its claim when done. The loser of a race waits and then replays none; one that would wait longer
than --wait is refused.

Why a log of claims, and not the other Kafka-only locks (docs/brokers.md):
- a consumer group holding a one-partition topic: the holder leaves while the waiter joins, which
  is the very order that wedges a Tansu group for good (its leader leaves mid-rebalance);
- a transactional.id per job: a second producer fences the first, whose replays Kafka aborts but
  Tansu makes visible, and the stage workers read uncommitted records anyway;
- committing a per-job group's read position: two runs that start together read the same
  position, so it orders runs one after the other but does not keep two apart.
A log read back needs only what both brokers do right: one partition's order and acks=all
(the same scheme as the scheduler's tick claims, jobs/scheduling/scheduler.py). A run killed while
it holds the claim never releases it: the claim lapses LEASE_S after it was made, and a run that
is still reading when its own claim is about to lapse stops before it replays anything."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from kafka_io.clients import make_producer
from kafka_io.errors import BrokerUnavailableError
from kafka_io.produce import produce_all, produce_located
from kafka_io.reading import TopicFollower
from kafka_io.records import OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import Topics

LEASE_S = 600.0  # a claim never released (its run was killed) stops counting after this
LOCK_KEY = b"dlq-replay"  # every claim and release: one key, so one partition and one order


class ReplayBusyError(RuntimeError):
    """Another `dlq replay` of the same dead-letter topic held it for longer than this one may wait."""


@dataclass(frozen=True)
class Claim:
    run: str
    who: str
    at_ms: int
    offset: int

    def described(self, lease_s: float) -> str:
        since = datetime.fromtimestamp(self.at_ms / 1000, UTC)
        lapses = datetime.fromtimestamp(self.at_ms / 1000 + lease_s, UTC)
        return (
            f"the dlq replay {self.run} started by {self.who} at {since:%Y-%m-%d %H:%M:%S} UTC (if it was killed, "
            f"its claim lapses at {lapses:%H:%M:%S} UTC)"
        )


def _entry(topics: Topics, event: str, run: str, who: str) -> OutRecord:
    value = {"event": event, "run": run, "who": who, "at_ms": int(time.time() * 1000)}
    return OutRecord(topics.dlq_replays, json.dumps(value).encode(), key=LOCK_KEY)


@contextmanager
def replay_turn(
    settings: KafkaSettings,
    topics: Topics,
    *,
    wait_s: float,
    lease_s: float = LEASE_S,
    on_wait: Callable[[str], None] = lambda line: None,
) -> Iterator[Callable[[], None]]:
    """Hold the dead-letter topic's replay claim for the body; ReplayBusyError if an earlier
    claim is neither released nor lapsed within wait_s. The body gets a check to call just before
    it replays: it raises ReplayBusyError if this claim has (nearly) lapsed meanwhile."""
    ensure_topics(settings, [TopicSpec(topics.dlq_replays, 1)])
    run, who = uuid.uuid4().hex[:12], f"{socket.gethostname()} pid {os.getpid()}"
    producer = make_producer(settings.with_client_id("dlq-replay-lock"))
    claimed = time.monotonic()
    partition, mine = produce_located(producer, _entry(topics, "claim", run, who))
    try:
        _wait_for_earlier(settings, topics, partition, mine, wait_s, lease_s, on_wait)

        def still_mine() -> None:
            # a margin for the replay's own produce, which is seconds: past it, another run may go on
            if time.monotonic() - claimed > lease_s * 0.9:
                raise ReplayBusyError(
                    f"this replay took longer than its {lease_s:.0f} s claim on {topics.dead_letters}, so "
                    "another may have started: nothing was replayed; run it again"
                )

        yield still_mine
    finally:
        produce_all(producer, [_entry(topics, "release", run, who)])


def _wait_for_earlier(
    settings: KafkaSettings,
    topics: Topics,
    partition: int,
    mine: int,
    wait_s: float,
    lease_s: float,
    on_wait: Callable[[str], None],
) -> None:
    """Read the claim log until every claim before offset `mine` is released or lapsed."""
    pending: dict[str, Claim] = {}
    released: set[str] = set()
    read_to = -1
    told = False
    deadline = time.monotonic() + wait_s
    read_back_by = time.monotonic() + 60
    with TopicFollower(settings, [topics.dlq_replays], only_partition=partition) as follower:
        while True:
            for msg in follower.poll(0.2):
                read_to = max(read_to, msg.offset)
                try:
                    entry = json.loads(msg.value)
                    run, event = str(entry["run"]), entry["event"]
                except (ValueError, KeyError, TypeError):
                    continue  # not an entry of ours
                if event == "release":
                    released.add(run)
                    pending.pop(run, None)
                elif event == "claim" and msg.offset < mine and run not in released:
                    pending[run] = Claim(run, str(entry.get("who", "?")), int(entry.get("at_ms", 0)), msg.offset)
            if read_to < mine:  # every claim before ours is known once ours is read back
                if time.monotonic() > read_back_by:
                    raise BrokerUnavailableError(
                        f"the replay claim at {topics.dlq_replays}/{partition}/{mine} was acked, not read back in 60 s"
                    )
                continue
            now_ms = time.time() * 1000
            live = sorted((c for c in pending.values() if now_ms - c.at_ms < lease_s * 1000), key=lambda c: c.offset)
            if not live:
                return
            if time.monotonic() >= deadline:
                raise ReplayBusyError(
                    f"not replayed: {live[0].described(lease_s)} still holds {topics.dead_letters}; nothing was "
                    f"replayed; run it again once that one has finished (or give --wait more than {wait_s:g} s)"
                )
            if not told:
                on_wait(f"waiting for {live[0].described(lease_s)} to finish (--wait {wait_s:g} s)")
                told = True
