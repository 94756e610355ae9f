"""Two preprocess workers of one host share one reader of the results cache
(preprocess_app/cache_share.py), on the real broker and workers: a file submitted again is reused
whole whichever worker takes its records, only one worker keeps a store of cache.<model> (its
spool file open), and with that one SIGKILLed the other reads it and a third submission is reused
whole."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import TinyModel


def spools(pid: int) -> int:
    """The results stores' spool files the process holds open (reuse/store.py)."""
    fds = Path(f"/proc/{pid}/fd")
    return sum(1 for fd in fds.iterdir() if _target(fd).endswith(".spool"))


def _target(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:  # closed meanwhile
        return ""


def counts(pipeline: RunningPipeline, source: str) -> tuple[int, int]:
    done = pipeline.cli("submit", source, "--model", "tiny", "--wait")
    assert done.returncode == 0, done.stderr
    status = json.loads(pipeline.cli("status", done.stdout.strip(), "--json").stdout)
    return status["counts"]["inferred"], status["counts"]["reused"]


def test_a_hosts_preprocess_workers_share_one_reader_of_the_cache_and_replace_it_when_it_dies(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    pre = [pipeline.start("preprocess", "preprocess", "--batch-size", "8") for _ in range(2)]
    pipeline.start("gpu", "gpu", "--model", "tiny")
    source = str(write_jsonl(tmp_path / "in.jsonl", example_lines(400)))
    assert counts(pipeline, source) == (400, 0)
    assert counts(pipeline, source) == (0, 400)
    held = [spools(worker.process.pid) for worker in pre]
    assert sorted(held) == [0, 1]  # one reads the cache, the other asks it
    dead, alive = (pre[0], pre[1]) if held[0] else (pre[1], pre[0])
    dead.process.send_signal(signal.SIGKILL)
    dead.process.wait()
    pipeline.workers.remove(dead)
    assert counts(pipeline, source) == (0, 400)
    assert spools(alive.process.pid) == 1
