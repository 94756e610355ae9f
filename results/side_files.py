"""What `results` and `run` write besides the usual output: the OpenAI batch output (one line per
request) and the error file. Both need the job's submitted records (jobs/job_records.py) beside
its outcomes (a ResultSpill)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from producers import InputError
from results import error_file, openai_batch
from results.outcome import dumps_line
from results.output import OutputFormat, write_file, write_output
from results.spill import ResultSpill
from results.submitted import Submitted
from schemas import InferenceResult


def _lines(lines: Iterable[dict[str, Any]]) -> Callable[[Callable[[bytes], object]], int]:
    def write(put: Callable[[bytes], object]) -> int:
        count = 0
        for line in lines:
            put(dumps_line(line))
            count += 1
        return count

    return write


def write_openai(spill: ResultSpill, submitted: list[Submitted], path: Path | None, out: IO[str], job_id: str) -> int:
    """The job's answered requests in OpenAI's batch output shape to path (or out); the lines written."""
    requests = openai_batch.requests_of(submitted)
    results = (item for item in spill.ordered() if isinstance(item, InferenceResult))
    lines = openai_batch.output_lines(requests, results, job_id)
    return write_output(path, out, OutputFormat.JSONL, _lines(lines), lambda f: 0)


def write_errors(
    spill: ResultSpill,
    submitted: list[Submitted],
    path: Path,
    missing: error_file.Missing,
    openai_shape: bool,
    job_id: str,
    invalid: Iterable[InputError] = (),
) -> int:
    """The error file: a line per input line that was not submitted (`invalid`: what --skip-invalid
    left out) and per record (openai_shape: per request) without a result; the lines written."""
    outcomes = spill.outcomes()
    if openai_shape:
        requests = openai_batch.requests_of(submitted)
        rejected = (openai_batch.invalid_line(error) for error in invalid)
        lines = itertools.chain(rejected, openai_batch.error_lines(requests, outcomes, missing, job_id))
    else:
        rejected = (error_file.invalid_line(error) for error in invalid)
        lines = itertools.chain(rejected, error_file.error_lines(submitted, outcomes, missing))
    write = _lines(lines)
    return write_file(path, lambda f: write(f.write), binary=True)
