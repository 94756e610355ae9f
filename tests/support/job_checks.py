"""What a finished job must show through the CLI after a fault: exact counts, every record once.

Shared by the crash trials (test_recovery.py, one host) and the network-fault trials
(multihost.py, hosts as network namespaces): each has a `cli(*args)` that runs `nearline` where
its client is."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Protocol


class RunsCli(Protocol):
    def cli(self, *args: str) -> subprocess.CompletedProcess[str]: ...


def assert_status_is_exact(where: RunsCli, job_id: str, total: int, reused: int | None = None) -> None:
    """`nearline status`: completed, with exact counts. It counts distinct ids, so a redelivery
    after a kill or a cut must not inflate them. `reused`: how many records' results came from the
    results cache (docs/reuse.md), the rest inferred; None: any number, as where a text repeats
    one whose result may or may not be cached yet when it is looked up."""
    done = where.cli("status", job_id, "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["state"] == "completed"
    if reused is None:
        reused = status["counts"]["reused"]
    assert status["counts"] == {
        "submitted": total,
        "preprocessed": total,
        "inferred": total - reused,
        "reused": reused,
        "dead_lettered": 0,
        "cancelled": 0,
        "expired": 0,
    }, status["counts"]


def assert_exactly_one_result_each(where: RunsCli, job_id: str, ids: list[str], out: Path) -> None:
    """`nearline results`: every record once, in input order, nothing dead-lettered, nothing lost."""
    done = where.cli("results", job_id, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ids
