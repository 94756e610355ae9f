"""A job's terms: what it is asked besides its input and lane (glossary: terms), one record that a
Job and a Schedule both hold (schemas/records.py: WithTerms writes them as flat Avro fields)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobTerms:
    """What a job is asked besides its input and lane (glossary: terms): `--label`,
    `--complete-within`, `--notify` and `--no-reuse`. A Job holds its own, a Schedule those of each
    job it submits; both write them as flat Avro fields of the same names (WithTerms)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    complete_within_s: float | None = None  # the job expires this long after its submission
    notify: str | None = None  # webhook URL told when the job ends (jobs/notifications/)
    reuse: bool = True  # results cached for the same content and model version are reused (docs/reuse.md)

    def deadline_at(self, submitted_at: int) -> int | None:
        """When a job submitted at `submitted_at` (microseconds) expires; None without a window.
        Counted from the submission's start, as OpenAI's completion window counts from creation."""
        return None if self.complete_within_s is None else submitted_at + round(self.complete_within_s * 1e6)
