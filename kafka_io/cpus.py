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
