"""How many CPUs a worker may use here: what sizes its thread pools when the operator does not.

os.cpu_count() is the machine's count. In a container with a CPU limit (a Kubernetes pod's
`resources.limits.cpu`, a cgroup quota) or a CPU affinity mask (taskset, cpuset) it is more than
the process may run on, and a pool sized by it makes threads the kernel throttles.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def usable_cpus(cgroup: Path = CGROUP) -> int:
    """CPUs in this process's affinity mask, capped by its cgroup's CPU quota (rounded up)."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        count = os.cpu_count() or 1
    quota = cpu_quota(cgroup)
    if quota is not None:
        count = min(count, max(1, math.ceil(quota)))
    return max(1, count)


def cpu_quota(cgroup: Path = CGROUP) -> float | None:
    """The cgroup's CPU limit in CPUs (cgroup v2 cpu.max, else v1 cfs quota/period); None when
    there is none or it cannot be read."""
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((cgroup / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((cgroup / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def parse_cpu_list(text: str) -> frozenset[int]:
    """CPU ids from a list as taskset and cpusets write it: "0-3,6" is 0, 1, 2, 3 and 6."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        try:
            low, high = int(first), int(last if dash else first)
        except ValueError:
            raise ValueError(f"{text!r} is not a CPU list (like 0-3,6)") from None
        if low < 0 or high < low:
            raise ValueError(f"{text!r}: {part!r} is not a range of CPU ids (like 0-3)")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def host_cpus(engine: frozenset[int], allowed: frozenset[int] | None = None) -> frozenset[int]:
    """The CPUs left to a worker's own threads (its Kafka loop, post-process and Kafka clients) once
    `engine` is given to an engine that computes on the CPU: those the process may run on, less the
    engine's. Raises ValueError when the engine's are not there or leave none."""
    if allowed is None:
        allowed = host_cpu_ids()
    if not engine:
        raise ValueError("no engine CPUs given")
    if engine - allowed:
        raise ValueError(f"engine CPUs {_shown(engine - allowed)}: not CPUs of this host (it has {_shown(allowed)})")
    left = allowed - engine
    if not left:
        raise ValueError(f"engine CPUs {_shown(engine)} are every CPU of this host: none left for the worker's own")
    return left


def _shown(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def host_cpu_ids(cgroup: Path = CGROUP) -> frozenset[int]:
    """Every CPU a thread of this process may be moved to: its cgroup's cpuset (a container's), else
    every CPU of the machine; not the process's affinity mask, which a thread may widen."""
    try:
        return parse_cpu_list((cgroup / "cpuset.cpus.effective").read_text().strip())
    except (OSError, ValueError):
        return frozenset(range(os.cpu_count() or 1))
