"""Child processes of a test: `nearline run` as a child whose stderr is read line by line, the
processes below it (from /proc), and stopping a run at a point of the job chosen by construction."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kafka_io.offsets import end_offsets
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topology import ENV_NAMESPACE, Topics
from tests.support.waiting import wait_until


def descendants(pid: int) -> set[int]:
    """Every process below pid, from /proc (children of every thread)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                kids = Path(f"/proc/{parent}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                if kid not in found:
                    found.add(kid)
                    todo.append(kid)
    return found


def running(pid: int) -> bool:
    try:
        return ") Z " not in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class EmbeddedRun:
    """`nearline run` on the embedded broker as a child process whose stderr is read line by line."""

    def __init__(self, *args: str, repository: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k not in (ENV_BOOTSTRAP, ENV_NAMESPACE)}
        env["NEARLINE_MODEL_REPOSITORY"] = str(repository)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "run", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []

    def wait_for(self, predicate: str, timeout_s: float = 120) -> str:
        """The first stderr line containing predicate (blocking reads; the run writes often)."""
        assert self.process.stderr is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            if predicate in line:
                return line
        raise AssertionError(f"no {predicate!r} in:\n{''.join(self.lines)}")

    def finish(self, timeout_s: float) -> tuple[int, str]:
        """Exit code and the rest of stderr; the run must end within timeout_s."""
        _, rest = self.process.communicate(timeout=timeout_s)
        return self.process.returncode, "".join(self.lines) + rest


@contextmanager
def mid_job(run: EmbeddedRun) -> Iterator[set[int]]:
    """Inside: the run has shown some results read and its job cannot complete; yields the run's
    children. Mid-job by construction: the whole job takes about as long as the 5 s between
    progress lines, so once the results topic holds some, the GPU worker is frozen (nothing more
    can complete) until the run has shown it read them, and stays frozen until the block ends."""
    address = run.wait_for("embedded broker on").split("embedded broker on ")[1].split(";")[0].strip()
    children = descendants(run.process.pid)
    (gpu,) = [p for p in children if "worker gpu" in cmdline(p)]
    run.wait_for("submitted")
    settings = KafkaSettings(address)

    def running_still() -> None:
        assert run.process.poll() is None, "the run ended before a result was stored"

    wait_until(
        lambda: sum(end_offsets(settings, Topics().results).values()),
        120,
        "a result stored",
        every_s=0.02,
        meanwhile=running_still,
    )
    os.kill(gpu, signal.SIGSTOP)
    try:
        while run.wait_for("records (").startswith("0/"):
            pass
        yield children
    finally:
        os.kill(gpu, signal.SIGCONT)


def stop_mid_job(run: EmbeddedRun, sig: int) -> set[int]:
    """Send sig to the run mid-job (mid_job); the run's children."""
    with mid_job(run) as children:
        run.process.send_signal(sig)
    return children


def assert_all_gone(pids: set[int], timeout_s: float) -> None:
    wait_until(
        lambda: {p: cmdline(p) for p in pids if running(p)},
        timeout_s,
        "every process gone",
        until=lambda left: not left,
        every_s=0.1,
    )
