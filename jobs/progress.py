"""Progress and summary lines for long work. Pure formatting, tested without a terminal."""

from __future__ import annotations

from dataclasses import dataclass


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "--"
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


@dataclass
class Progress:
    """Records done of a total since `started_at`: the one rate and ETA rule of every command that
    follows a job (run, submit --wait, status --watch)."""

    total: int
    started_at: float
    done: int = 0
    failed: int = 0
    baseline: int = 0  # records already done at started_at (status --watch of a running job)

    def rate(self, now: float) -> float:
        elapsed = now - self.started_at
        return (self.done - self.baseline) / elapsed if elapsed > 0 else 0.0

    def eta(self, now: float) -> float | None:
        rate = self.rate(now)
        return (self.total - self.done) / rate if rate > 0 else None

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 1.0

    def line(self, now: float) -> str:
        failed = f", {self.failed} dead-lettered" if self.failed else ""
        return (
            f"{self.done}/{self.total} records ({100 * self.fraction:.0f}%{failed})  "
            f"{self.rate(now):.1f} rec/s  ETA {format_eta(self.eta(now))}"
        )

    def bar_line(self, now: float, width: int, label: str = "", blocks: str = "█░") -> str:
        """One terminal line of at most width-1 characters (the last column would wrap on some
        terminals): [label] a bar, percent, records, rate, ETA, dead letters so far."""
        failed = f"  {self.failed:,} dead-lettered" if self.failed else ""
        stats = (
            f" {100 * self.fraction:3.0f}%  {self.done:,}/{self.total:,} records  "
            f"{self.rate(now):,.1f} rec/s  ETA {format_eta(self.eta(now))}{failed}"
        )
        head = f"{label} " if label else ""
        room = width - 1 - len(head) - len(stats) - 2
        if room < 10:  # a narrow terminal: the figures matter more than the bar
            return (head + stats.strip())[: width - 1]
        size = min(room, 40)
        filled = int(size * self.fraction)
        return f"{head}[{blocks[0] * filled}{blocks[1] * (size - filled)}]{stats}"


@dataclass(frozen=True)
class Summary:
    records: int
    dead_lettered: int
    seconds: float
    batches: int
    mean_batch_size: float
    completion_tokens: int = 0  # a generation job's: what its completions hold, instead of batches
    reused: int = 0  # of `records`, written from the results cache: in no batch, no tokens generated

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        dead = f", {self.dead_lettered} dead-lettered" if self.dead_lettered else ""
        head = f"{self.records} records{dead} in {self.seconds:.1f} s: {self.records_per_s:.1f} records/s, "
        if self.reused:
            head += f"{self.reused} reused from earlier results"
            if self.reused == self.records:
                return head
            head += f", the other {self.records - self.reused}: "
        if self.completion_tokens:
            rate = self.completion_tokens / self.seconds if self.seconds > 0 else 0.0
            return head + f"{self.completion_tokens:,} tokens generated ({rate:,.1f} tokens/s)"
        batches = f"{self.batches} batch" if self.batches == 1 else f"{self.batches} batches"
        return head + f"{batches}, mean batch size {self.mean_batch_size:.1f}"
