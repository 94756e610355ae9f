"""Reused results (docs/reuse.md) counted apart from computed ones, from their header, and marked in
their output lines: JobOutcome (status, jobs list, submit --wait), Usage, to_json."""

from __future__ import annotations

import numpy as np

from kafka_io.records import REUSED_HEADER, ConsumedRecord
from kafka_io.topology import Topics
from results.outcome import JobOutcome, to_json
from results.usage import Usage
from schemas import InferenceResult, Tensor, encode
from schemas.attributes import REUSED_STAMP

TOPICS = Topics("ns")


def result(record_id: str, reused: bool) -> InferenceResult:
    outputs = (Tensor.from_array("embedding", np.asarray([0.5, 0.25], dtype=np.float32)),)
    computed = {"submitted": 1, "inference_start": 10, "inference_end": 30}
    stamps = {"submitted": 1, REUSED_STAMP: 2} if reused else computed
    return InferenceResult("job", record_id, 0, "m", "1", outputs, "b", 2, {}, stamps, length=5)


def message(record_id: str, reused: bool) -> ConsumedRecord:
    headers = (("job_id", b"job"), *(((REUSED_HEADER, b"1"),) if reused else ()))
    return ConsumedRecord("ns.results", 0, 0, encode(result(record_id, reused)), f"job/{record_id}".encode(), headers)


def test_reused_results_are_counted_apart_whether_read_from_bytes_or_decoded() -> None:
    messages = [message("a", True), message("b", False), message("a", False), message("c", True)]
    for keep_results in (False, True):  # status reads the leading fields only; results decodes whole
        outcome = JobOutcome("job", keep_results=keep_results, usage=Usage())
        outcome.add(messages, TOPICS)
        assert outcome.done == 3 and outcome.reused == {"a", "c"}  # the first copy of "a" was the reused one
        assert outcome.usage is not None
        assert (outcome.usage.records, outcome.usage.reused) == (3, 2)
        assert outcome.usage.length == 5  # the computed record's tokens only
        assert outcome.usage.to_dict("text")["reused_records"] == 2


def test_a_reused_results_line_says_so_and_a_computed_ones_does_not() -> None:
    assert to_json(result("a", True))["reused"] is True
    assert "reused" not in to_json(result("b", False))
