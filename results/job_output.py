"""What every output format's writer is handed (results/formats.py): a job's outcomes, read
through a spill, and the records it submitted, read only when a writer or the error file asks
(from the job's raw topic or its input: jobs/job_records.py; this room reads neither)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from results.spill import ResultSpill
from results.submitted import Submitted


@dataclass(frozen=True)
class JobOutput:
    spill: ResultSpill
    read_submitted: Callable[[], list[Submitted]]

    @cached_property
    def submitted(self) -> list[Submitted]:
        """The job's submitted records in input order, read once (the output and the error file
        may both need them)."""
        return self.read_submitted()
