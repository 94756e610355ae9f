"""The CPU count that sizes worker pools: affinity mask and cgroup quota, not the machine's count."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.cpus import cpu_quota, host_cpu_ids, host_cpus, parse_cpu_list, usable_cpus


def cgroup_v2(tmp_path: Path, cpu_max: str) -> Path:
    (tmp_path / "cpu.max").write_text(cpu_max + "\n")
    return tmp_path


def cgroup_v1(tmp_path: Path, quota_us: int, period_us: int = 100000) -> Path:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(f"{period_us}\n")
    return tmp_path


def test_a_cgroup_v2_limit_is_read_in_cpus(tmp_path: Path) -> None:
    assert cpu_quota(cgroup_v2(tmp_path, "150000 100000")) == 1.5


def test_no_limit_in_either_cgroup_version_is_none(tmp_path: Path) -> None:
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    assert cpu_quota(cgroup_v2(v2, "max 100000")) is None
    assert cpu_quota(cgroup_v1(v1, -1)) is None
    assert cpu_quota(tmp_path / "missing") is None


def test_a_fractional_limit_rounds_up_and_never_exceeds_the_affinity_mask(tmp_path: Path) -> None:
    mask = len(os.sched_getaffinity(0))
    assert usable_cpus(cgroup_v1(tmp_path, 50000)) == 1  # half a CPU: still one thread
    assert usable_cpus(cgroup_v2(tmp_path, f"{(mask + 7) * 100000} 100000")) == mask


@pytest.mark.process
@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
def test_a_process_pinned_to_one_cpu_sizes_its_pools_for_one() -> None:
    out = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", "from runtime.cpus import usable_cpus; print(usable_cpus())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "1"


def test_a_cpu_list_reads_as_taskset_writes_it() -> None:
    assert parse_cpu_list("0-3,6") == {0, 1, 2, 3, 6}
    assert parse_cpu_list(" 2 ") == {2}
    for bad in ("", "a", "3-1", "-1", "0-", "1,,2"):
        with pytest.raises(ValueError, match="CPU"):
            parse_cpu_list(bad)


def test_the_host_keeps_the_cpus_the_engine_is_not_given() -> None:
    host = frozenset({0, 1, 2, 3})
    assert host_cpus(frozenset({0, 1}), host) == {2, 3}
    with pytest.raises(ValueError, match="every CPU of this host"):
        host_cpus(host, host)
    with pytest.raises(ValueError, match=r"engine CPUs 7: not CPUs of this host \(it has 0,1,2,3\)"):
        host_cpus(frozenset({3, 7}), host)
    with pytest.raises(ValueError, match="no engine CPUs"):
        host_cpus(frozenset(), host)


def test_a_containers_cpuset_bounds_the_cpus_a_thread_may_be_given(tmp_path: Path) -> None:
    (tmp_path / "cpuset.cpus.effective").write_text("4-7\n")
    assert host_cpu_ids(tmp_path) == {4, 5, 6, 7}
    assert host_cpu_ids(tmp_path / "missing") == set(range(os.cpu_count() or 1))
