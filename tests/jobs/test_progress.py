"""Progress as users see it: a bar redrawn in place on a terminal (driven here through a real
pseudo-terminal), plain lines when stderr is a pipe or a log."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest

from jobs.launch.kept_cache import ENV_RESULTS_CACHE
from jobs.progress import Progress, Summary
from model_repository.folders import ENV_MODEL_REPOSITORY
from tests.support.tiny_model import TinyModel

ROOT = Path(__file__).parents[2]


def test_the_bar_line_fills_with_the_fraction_and_never_reaches_the_last_column() -> None:
    p = Progress(total=1200, started_at=0.0, done=300, failed=2)
    line = p.bar_line(now=10.0, width=120)
    assert len(line) <= 119
    bar = re.search(r"\[(█*)(░*)\]", line)
    assert bar is not None and (len(bar.group(1)), len(bar.group(2))) == (10, 30)  # a quarter of 40 filled
    assert len(p.bar_line(10.0, 90)) == 89  # a narrower terminal: a shorter bar, the figures whole
    assert " 25%" in line and "300/1,200 records" in line and "30.0 rec/s" in line
    assert "ETA 30s" in line and "2 dead-lettered" in line
    assert p.bar_line(10.0, 100, label="job-7 running").startswith("job-7 running [")
    assert "[" not in p.bar_line(10.0, 50)  # too narrow for a bar: the figures stay, cut to fit
    assert len(p.bar_line(10.0, 20)) == 19
    assert "#" in p.bar_line(10.0, 100, blocks="#-")  # a terminal that cannot show blocks
    assert "100%" in Progress(total=0, started_at=0.0).bar_line(1.0, 100)


def run_tiny(args: list[str], repository: Path, **streams: Any) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARLINE_") or k == ENV_RESULTS_CACHE}
    env[ENV_MODEL_REPOSITORY] = str(repository)
    return subprocess.Popen([sys.executable, "-m", "jobs.cli", "run", *args], env=env, cwd=ROOT, **streams)


@pytest.mark.process
def test_run_draws_a_live_bar_on_a_terminal_and_plain_lines_into_a_pipe(
    tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    examples = (ROOT / "producers" / "examples" / "python-docs-paragraphs.jsonl").read_text().splitlines()
    rows = [{**json.loads(examples[i % len(examples)]), "id": f"r{i}"} for i in range(3000)]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = [str(source), "--model", "tiny", "-o", str(tmp_path / "out.jsonl")]

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))  # 120 columns
    process = run_tiny(args, model_repository, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every writer of the terminal has closed it
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert process.wait(timeout=60) == 0, seen.decode(errors="replace")
    terminal = seen.decode()
    draws = [d.replace("\x1b[K", "") for d in terminal.split("\r") if d.startswith("[") or d.startswith("\x1b")]
    bars = [d.strip() for d in draws if d.startswith("[")]
    assert len(bars) >= 2, terminal  # redrawn in place, not printed once
    assert all(len(b) <= 119 for b in bars), bars
    assert re.search(r"\[█{40}\] 100%  3,000/3,000 records", bars[-1]), bars[-1]
    assert "100%" not in bars[0]
    assert "\x1b[K" in terminal
    assert re.search(r"wrote 3000 lines to", terminal.split(bars[-1], 1)[1]), terminal  # below the ended bar

    piped = run_tiny(args, model_repository, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = piped.communicate(timeout=60)
    assert piped.returncode == 0, err.decode()
    log = err.decode()
    assert "\r" not in log and "\x1b" not in log and "█" not in log
    assert "3000/3000 records (100%)" in log


def test_a_generation_job_is_summed_up_in_the_tokens_it_generated() -> None:
    line = Summary(
        records=64, dead_lettered=1, seconds=8.0, batches=9, mean_batch_size=7.1, completion_tokens=2048
    ).line()
    assert line == "64 records, 1 dead-lettered in 8.0 s: 8.0 records/s, 2,048 tokens generated (256.0 tokens/s)"


def test_reused_records_are_summed_up_apart_and_the_batches_are_the_computed_ones() -> None:
    some = Summary(records=100, dead_lettered=0, seconds=2.0, batches=3, mean_batch_size=8.0, reused=76).line()
    assert some == (
        "100 records in 2.0 s: 50.0 records/s, 76 reused from earlier results, the other 24: 3 batches, "
        "mean batch size 8.0"
    )
    every = Summary(records=100, dead_lettered=0, seconds=2.0, batches=0, mean_batch_size=0.0, reused=100).line()
    assert every == "100 records in 2.0 s: 50.0 records/s, 100 reused from earlier results"
    generated = Summary(
        records=10, dead_lettered=0, seconds=2.0, batches=1, mean_batch_size=4.0, completion_tokens=64, reused=6
    ).line()
    assert generated.endswith("6 reused from earlier results, the other 4: 64 tokens generated (32.0 tokens/s)")


def test_a_generation_job_s_status_counts_the_tokens_generated_so_far_beside_its_records() -> None:
    from jobs.registry import JobStatus
    from schemas.records import Job

    status = JobStatus(Job("gen-1", "smollm2-135m", "prompts.jsonl", "text", 64, 1))
    assert "tokens generated" not in status.line()  # none yet, as for an encoder's job
    assert status.outcome.usage is not None
    status.outcome.usage.completion_tokens = 12_345
    line = "gen-1 submitted: 0/64 done (preprocessed 0, inferred 0, dead-lettered 0)  12,345 tokens generated"
    assert status.line() == line
