"""A job submission's records by id, as the error file and the OpenAI batch output list them: read
from the job's raw topic or its input (jobs/job_records.py), or, where neither holds them, from its
results and dead letters."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from schemas import DeadLetter, InferenceResult


@dataclass(frozen=True)
class Submitted:
    record_id: str
    seq: int
    attributes: dict[str, str] = field(default_factory=dict)


def submitted_from_outcomes(items: Iterable[InferenceResult | DeadLetter]) -> list[Submitted]:
    """The records that have an outcome, in input order: the job's records as far as its results
    and dead letters tell, where its raw topic no longer holds them (retention) or the job was
    never registered. Records with neither cannot be known so."""
    found: list[Submitted] = []
    for item in items:
        if isinstance(item, InferenceResult):
            found.append(Submitted(item.record_id, item.seq, dict(item.attributes)))
        elif item.record_id is not None:
            found.append(Submitted(item.record_id, len(found)))
    return found
