"""Progress on stderr while a command waits on a job (run, submit --wait, status --watch)."""

from __future__ import annotations

import os
import shutil
import sys
import time

import click

from jobs.progress import Progress


class ProgressDisplay:
    """Progress on stderr: on a terminal, a bar redrawn in place (and other lines printed above
    it); otherwise a plain line every `every_s` and at the end, so logs and pipes stay line-based."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.stream = sys.stderr  # what click.echo(err=True) writes to (click 8.5 deprecates get_text_stream)
        self.tty = self.stream.isatty()
        self.every_s = every_s
        self.drawn = False  # a bar is on the current line
        self.last = float("-inf")
        encoding = getattr(self.stream, "encoding", None) or "ascii"
        try:
            self.blocks = "█░" if "█░".encode(encoding) else "#-"
        except (UnicodeEncodeError, LookupError):
            self.blocks = "#-"

    def __call__(self, progress: Progress, label: str = "") -> None:
        now = time.monotonic()
        final = progress.done >= progress.total
        if self.tty:
            width = self._columns()
            self.stream.write("\r" + progress.bar_line(now, width, label, self.blocks) + "\x1b[K")
            self.drawn = not final
            if final:
                self.stream.write("\n")
            self.stream.flush()
        elif final or now - self.last >= self.every_s:
            click.echo((f"{label} " if label else "") + progress.line(now), err=True)
            self.last = now

    def _columns(self) -> int:
        try:  # the terminal stderr is on (shutil's asks stdout's, which -o may leave piped)
            return os.get_terminal_size(self.stream.fileno()).columns or 80
        except (OSError, ValueError, AttributeError):
            return shutil.get_terminal_size().columns

    def echo(self, line: str) -> None:
        """A line of its own, above the bar (which the next update draws again)."""
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.drawn = False
        click.echo(line, err=True)

    def close(self) -> None:
        """End a bar left mid-way (a failed or interrupted wait) so what follows starts a line."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False
