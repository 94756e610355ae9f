"""ResultSpill (on disk) and JobOutcome (in memory) keep the same result of each record: one rule,
jobs.results.wins_over, for redelivered copies, newer model versions and retried dead letters."""

from __future__ import annotations

from jobs.results import JobOutcome
from jobs.spill import ResultSpill
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import Topics
from tests.jobs.test_results_stream import dead, result


def consumed(records: list[OutRecord]) -> list[ConsumedRecord]:
    return [ConsumedRecord(r.topic, 0, i, r.value or b"", r.key, tuple(r.headers)) for i, r in enumerate(records)]


def test_spill_and_outcome_keep_the_same_result_of_each_record() -> None:
    topics = Topics(namespace="spill-rules")
    records = [
        result(topics.results, "job-r", 0, "1"),
        result(topics.results, "job-r", 0, "2"),  # a newer version replaces the first
        result(topics.results, "job-r", 0, "1"),  # an older one does not, and is no duplicate
        result(topics.results, "job-r", 0, "2"),  # the kept version again: a duplicate
        dead(topics, "job-r", 1),
        result(topics.results, "job-r", 1, "1"),  # a retried record that succeeded is not dead
        dead(topics, "job-r", 2),
        dead(topics, "job-r", 2),  # a dead letter once
        result(topics.results, "job-r", 3, "10"),
        result(topics.results, "job-r", 3, "9"),  # numeric order: 9 < 10
        result(topics.results, "job-x", 4, "1"),  # another job's
    ]
    outcome = JobOutcome("job-r")
    outcome.add(consumed(records), topics)
    with ResultSpill("job-r") as spill:
        spill.add(consumed(records), topics)
        assert (spill.done, spill.failed, spill.duplicates) == (outcome.done, outcome.failed, outcome.duplicates)
        assert (spill.done, spill.failed, spill.duplicates) == (4, 1, 1)
        kept = [(item.record_id, getattr(item, "model_version", None)) for item in spill.ordered()]
    assert kept == [(item.record_id, getattr(item, "model_version", None)) for item in outcome.ordered()]
    assert kept == [("r0", "2"), ("r1", "1"), ("r2", None), ("r3", "10")]
