"""The error file (`results --errors`, `run --errors`): one JSON line per record of the job with
no result, keyed by its id (and its request's custom_id, for an OpenAI batch file's record), saying
why: dead-lettered (with the stage and reason), cancelled, expired, or not done yet."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

from producers import InputError
from producers.openai_batch import CUSTOM_ID, INDEX
from results.job_output import JobOutput
from results.submitted import Submitted
from schemas import DeadLetter, Job

# Why a record with neither a result nor a dead letter has none
Missing = Literal["cancelled", "expired", "not_done"]


def missing_reason(job: Job | None) -> Missing:
    """Why the job's records without an outcome have none: it was cancelled, its deadline passed,
    or (still running, or its workers gone) it is not done."""
    if job is not None and job.cancelled_at is not None:
        return "cancelled"
    if job is not None and job.past_deadline():
        return "expired"
    return "not_done"


def invalid_line(error: InputError) -> dict[str, Any]:
    """A line of the input that was refused at submit and left out (--skip-invalid)."""
    return {"file": error.path, "line": error.line, "status": "invalid", "error": {"message": error.reason}}


def error_lines(
    submitted: Iterable[Submitted], outcomes: Mapping[str, DeadLetter | None], missing: Missing
) -> Iterator[dict[str, Any]]:
    """A line per submitted record without a result, in input order. `outcomes`: every record that
    has one, its dead letter, or None for a result."""
    for record in submitted:
        if record.record_id in outcomes and outcomes[record.record_id] is None:
            continue
        line: dict[str, Any] = {"id": record.record_id}
        if CUSTOM_ID in record.attributes:
            line["custom_id"] = json.loads(record.attributes[CUSTOM_ID])
            index = record.attributes.get(INDEX, "0")
            line["index"] = int(index) if index.isdigit() else index
        letter = outcomes.get(record.record_id)
        if letter is not None:
            line["status"] = "dead_lettered"
            line["error"] = {"stage": letter.stage, "type": letter.error_type, "message": letter.error}
        else:
            line["status"] = missing
        yield line


def lines_of(job: JobOutput, missing: Missing, invalid: Iterable[InputError]) -> Iterator[dict[str, Any]]:
    """The error file: a line per input line left out (`invalid`), then per submitted record
    without a result (error_lines)."""
    yield from (invalid_line(error) for error in invalid)
    yield from error_lines(job.submitted, job.spill.outcomes(), missing)
