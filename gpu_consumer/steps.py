"""The GPU loop's commit steps: what each poll window is handed to, and the one place that commits.

worker.py's run() is the loop (getsentry/arroyo's shape: the loop polls, a step takes the
windows and owns the commit; the poll loop, windows.py, and the Kafka edge know nothing of either):

    for window in windows(...):            # tick(), idle(), engine_idle(), window_waiting(),
        step.submit(window, ...)           # has_room() and queued() answer windows() and the
    step.finish()                          # lane picker between polls; before_revoke() runs
    step.close()                           # before partitions go

- PipelinedStep (at-least-once, the default): prepare here, execute and emit on the pipeline's
  threads (pipeline.py); its _commit() writes the offsets of the longest prefix of windows whose
  every output the broker confirmed (ledger.py).
- TransactionalStep (--exactly-once): each window prepared, executed and emitted in turn, its
  outputs produced in an open transaction (kafka_io.transactions.OpenTransaction) that its
  _commit() commits with the windows' offsets; an abort rewinds them, and they are polled again.
  It writes nothing to the results cache (gpu_consumer/cache_writes.py): in the transaction, a
  cache topic that refuses writes would abort every one, and the worker would stall on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from gpu_consumer.batcher import BatchSettings
from gpu_consumer.engines.protocol import Engine
from gpu_consumer.lanes import EngineTime
from gpu_consumer.ledger import Ledger
from gpu_consumer.metrics import GpuMetrics
from gpu_consumer.pipeline import Pipeline, PipelineSettings
from gpu_consumer.window_inference import handle_window, prepare
from kafka_io.clients import Consumer, Producer
from kafka_io.errors import KAFKA_FAULTS
from kafka_io.incarnation import BrokerIncarnation
from kafka_io.polling import Assignment, commit_offsets, records_in, window_offsets
from kafka_io.records import ConsumedRecord
from kafka_io.topology import Lane, Topics
from kafka_io.transactions import (
    OpenTransaction,
    TransactionAbortedError,
    TransactionWedgedError,
    resume_from_committed,
)
from model_repository.config import ModelConfig

log = logging.getLogger(__name__)

# The longest an exactly-once transaction stays open while windows keep coming: its results are
# invisible to read_committed readers until it commits.
TRANSACTION_AGE_S = 0.1


@dataclass
class WorkerStats:
    windows: int = 0
    records: int = 0


@dataclass(frozen=True)
class Inference:
    """What every window is run with."""

    engine: Engine | None  # None for a causal LM, whose engine runs through GenerationStep
    config: ModelConfig
    topics: Topics
    policy: BatchSettings
    worker_id: str  # windows are named <worker_id>-<n>, n counting this worker's windows
    # (job id, submission) of records not to run (cancelled, or past their deadline), asked again
    # as a queued window reaches the engine: kafka_io.cancellations.Cancellations.skips_submission
    skip_job: Callable[[str, int | None], bool] = lambda job_id, submission: False

    def window_id(self, n: int) -> str:
        return f"{self.worker_id}-{n}"


class EngineFlow(Protocol):
    """What the window loop asks of the work ahead of the engine: the lane picker
    (gpu_consumer/lanes.py) which lane has room, windows() whether to close a window early or
    hold it open."""

    @property
    def engine_time(self) -> EngineTime:
        """The lanes' recent engine seconds, of windows picked while both lanes waited (lanes.py)."""
        ...

    def has_room(self, lane: str) -> bool:
        """Whether a window of `lane` may be taken now."""
        ...

    def queued(self, lane: str) -> int:
        """Windows of `lane` taken and not started yet."""
        ...

    def engine_idle(self) -> bool:
        """Nothing would be gained by lingering: windows() closes a window early."""
        ...

    def window_waiting(self, lane: str) -> bool:
        """A window of `lane` closed now would not run any sooner: windows() holds it open."""
        ...


class SerialFlow:
    """The flow of a step that runs each window before the loop polls the next: room always,
    nothing queued, no reason to hurry or hold a window."""

    def __init__(self) -> None:
        self.engine_time = EngineTime()  # set by the step as it runs each window

    def has_room(self, lane: str) -> bool:
        return True

    def queued(self, lane: str) -> int:
        return 0

    def engine_idle(self) -> bool:
        return False

    def window_waiting(self, lane: str) -> bool:
        return False


class CommitStep(Protocol):
    """Takes the loop's windows and owns their commit. `stats.windows` counts the windows taken,
    `stats.records` the records committed; `flow` answers the loop's questions about the work in
    flight."""

    stats: WorkerStats

    @property
    def flow(self) -> EngineFlow: ...

    def submit(
        self, window: list[ConsumedRecord], sources: Sequence[ConsumedRecord], lane: Lane, contended: bool
    ) -> None:
        """Run `sources` (the window less cancelled jobs' records); commit `window`'s offsets once
        their outputs are stored."""
        ...

    def tick(self) -> None:
        """After every poll, also while no record comes."""
        ...

    def idle(self) -> None:
        """After a poll that left no record waiting."""
        ...

    def before_revoke(self) -> None: ...

    def finish(self) -> bool:
        """At the end of the windows: commit what was taken. False: the commit was undone, and
        windows() must be polled again for the records it gave back."""
        ...

    def close(self) -> None: ...


class PipelinedStep:
    """At-least-once: windows run on the pipeline's threads; committed over the confirmed prefix."""

    def __init__(
        self,
        consumer: Consumer,
        assignment: Assignment,
        incarnation: BrokerIncarnation,
        inference: Inference,
        new_producer: Callable[[], Producer],
        settings: PipelineSettings,
        metrics: GpuMetrics,
    ) -> None:
        self.stats = WorkerStats()
        self._consumer, self._inference = consumer, inference
        self._assignment, self._incarnation = assignment, incarnation
        assert inference.engine is not None
        # its engine_time is set by the engine thread; an idle engine starts on what has come
        # instead of waiting out the linger for more, and a window queued behind a busy engine
        # lets the next one gather until it starts
        self.flow = Pipeline(
            inference.engine, inference.config, inference.topics, new_producer, settings, metrics, inference.skip_job
        )

    def submit(
        self, window: list[ConsumedRecord], sources: Sequence[ConsumedRecord], lane: Lane, contended: bool
    ) -> None:
        work = self._inference
        assert work.engine is not None
        window_id = work.window_id(self.stats.windows)
        prepared = prepare(sources, work.engine, work.config, work.topics, window_id, work.policy)
        self.flow.submit(
            prepared,
            window_offsets(window),
            records_in(window),  # records, not Kafka records: a pack counts as what it holds
            lane,
            contended=contended,
            generation=self._assignment.revocations,
        )
        self.stats.windows += 1
        self._commit()

    def tick(self) -> None:
        self.flow.check()  # a stalled delivery is noticed even when no new window arrives
        self._commit()

    def idle(self) -> None:
        pass  # tick() has committed what is confirmed

    def before_revoke(self) -> None:
        # Inside the consumer's poll: commit only what needs no question to the broker. While a
        # connection loss is unexplained nothing can be committed, so there is nothing to wait for.
        if self._incarnation.doubting:
            log.warning("a revoke while the broker is in doubt; the windows in flight will be consumed again")
            return
        if not self.flow.finish(partial(self._commit, ask=False)):
            log.warning("windows still unconfirmed at revoke; their records will be consumed again")

    def finish(self) -> bool:
        self.flow.finish(self._commit)
        return True  # what is still unconfirmed is consumed again after a restart: nothing to poll

    def close(self) -> None:
        self.flow.close()

    def _commit(self, *, ask: bool = True) -> None:
        """The pipelined worker's one commit site: the longest confirmed prefix of windows.
        ask=False: never ask the broker who it is (inside a rebalance callback)."""
        self.stats.records += commit_confirmed(self._consumer, self._incarnation, self.flow.ledger, ask=ask)


def commit_confirmed(consumer: Consumer, incarnation: BrokerIncarnation, ledger: Ledger, *, ask: bool = True) -> int:
    """Commit the offsets of the ledger's longest confirmed prefix of windows (the at-least-once
    rule, ledger.py); the records committed. Nothing while a lost connection is unexplained: the
    broker may have come back without the logs these offsets point into (kafka_io/incarnation.py)."""
    if not incarnation.settled(consumer, ask=ask):
        return 0
    offsets, records = ledger.take_committable(stale_through=incarnation.stale_through)
    if not offsets:
        return 0
    try:
        commit_offsets(consumer, offsets)
    except KAFKA_FAULTS as exc:
        # The group moved on (a rebalance, a restarted broker): the outputs are stored and
        # keyed, so the records' redelivery only makes duplicates that readers drop.
        log.warning("commit failed (%s); its records may be consumed again", exc)
    return records


class TransactionalStep:
    """--exactly-once: windows run one after the other, their outputs and offsets in transactions
    of up to --max-windows-in-flight windows, committed when that many are in or TRANSACTION_AGE_S
    after the first, at once when no record is waiting, and before partitions are revoked."""

    def __init__(
        self,
        consumer: Consumer,
        assignment: Assignment,
        incarnation: BrokerIncarnation,
        inference: Inference,
        new_producer: Callable[[], Producer],
        settings: PipelineSettings,
        metrics: GpuMetrics,
    ) -> None:
        self.stats = WorkerStats()
        self._consumer, self._incarnation, self._new_producer = consumer, incarnation, new_producer
        self._assignment, self._inference, self._metrics = assignment, inference, metrics
        self._max_windows = settings.max_in_flight
        self._txn = self._open(new_producer())
        self.flow = SerialFlow()  # the loop runs each window before it polls the next
        metrics.follow(lambda: len(self._txn.windows))

    def _replace(self, exc: TransactionWedgedError) -> None:
        """A new producer for a wedged or fatally failed one (it fences the old: the same
        transactional id), and every window of the transaction read again from the group's
        committed offsets, which say whether it committed."""
        self._txn = self._open(self._new_producer())
        resume_from_committed(self._consumer, exc.consumed)
        self._assignment.at_eof.clear()

    def _open(self, producer: Producer) -> OpenTransaction:
        return OpenTransaction(producer, self._consumer, max_windows=self._max_windows, max_age_s=TRANSACTION_AGE_S)

    def submit(
        self, window: list[ConsumedRecord], sources: Sequence[ConsumedRecord], lane: Lane, contended: bool
    ) -> None:
        work = self._inference
        assert work.engine is not None
        started = time.perf_counter()
        out = handle_window(
            sources,
            work.engine,
            work.config,
            work.topics,
            work.window_id(self.stats.windows),
            work.policy,
            partial(self._metrics.executed, lane=lane),
        )
        if contended:  # the share is of the time both lanes wanted the engine
            self.flow.engine_time = self.flow.engine_time.served(lane, time.perf_counter() - started)
        try:
            self._txn.add(window, out)
        except TransactionWedgedError as exc:  # a fatal producer, not fenced: replaced
            self._replace(exc)
            return
        except TransactionAbortedError:
            self._assignment.at_eof.clear()
            return
        self._metrics.produced(out)
        self.stats.windows += 1
        if self._txn.due():
            self._commit()

    def tick(self) -> None:
        pass  # the transaction commits when due (submit), idle, revoked or finished

    def idle(self) -> None:
        self._commit()  # no window is half-gathered, so an abort may rewind

    def before_revoke(self) -> None:
        self._commit()

    def finish(self) -> bool:
        return self._commit()

    def close(self) -> None:
        pass  # no threads; a transaction left open is aborted when this transactional id starts again

    def _commit(self) -> bool:
        """The exactly-once worker's one commit site: the open transaction, outputs and offsets.

        Gated like the pipelined step's (kafka_io/incarnation.py), for another reason: a broker
        that kept its state keeps the transaction's offsets valid, but librdkafka's
        send_offsets_to_transaction, asked while the group coordinator is down, can wait past its
        timeout for ever (confluentinc/librdkafka#5456: a worker hung on a Kafka restart on its own
        data, tests/trials/test_apache_kafka.py). So the transaction stays open until the broker
        answers again; it grows by nothing meanwhile (nothing is polled), and a coordinator that
        timed it out makes the commit abort and rewind."""
        if self._txn.windows and not self._incarnation.settled(self._consumer):
            return False
        try:
            self.stats.records += self._txn.commit()
            return True
        except TransactionWedgedError as exc:
            self._replace(exc)
            return False
        except TransactionAbortedError:
            # rewound: its windows come back in later polls, so nothing is caught up until then
            self._assignment.at_eof.clear()
            return False
