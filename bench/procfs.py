"""What /proc says about a process or one of its threads, for the benchmarks' figures."""

from __future__ import annotations

import os
from pathlib import Path


def task_dir(pid: int, tid: int | None = None) -> Path:
    return Path(f"/proc/{pid}") if tid is None else Path(f"/proc/{pid}/task/{tid}")


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User + system CPU time so far (fields 14 and 15 of stat(5)); OSError once it has ended."""
    fields = (task_dir(pid, tid) / "stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_field(pid: int, name: str, tid: int | None = None) -> int:
    """One number of /proc/.../status (VmHWM in KiB, voluntary_ctxt_switches...); 0 if absent."""
    for line in (task_dir(pid, tid) / "status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    return 0
