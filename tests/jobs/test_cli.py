"""CLI behaviour that needs no workers: clear errors and distinct exit codes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest


def nearline(*args: str, env_servers: str = "127.0.0.1:1") -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "NEARLINE_BOOTSTRAP_SERVERS": env_servers}
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "command",
    [
        ["submit", "{input}", "--model", "tiny"],
        ["results", "job-x"],
        ["worker", "gpu", "--model", "tiny"],
        ["worker", "preprocess"],
        ["run", "{input}", "--model", "tiny", "--bootstrap-servers", "127.0.0.1:1"],
    ],
)
def test_a_broker_that_is_down_is_named_with_exit_code_3(command: list[str], tmp_path: Path) -> None:
    good = tmp_path / "in.txt"
    good.write_text("one line\n")
    started = time.monotonic()
    done = nearline(*[a.replace("{input}", str(good)) for a in command])
    assert done.returncode == 3, done.stderr
    assert "127.0.0.1:1" in done.stderr and "did not answer" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 30


def test_help_lists_the_env_var_of_every_shared_option() -> None:
    done = nearline("run", "--help")
    assert done.returncode == 0
    for var in ("NEARLINE_BOOTSTRAP_SERVERS", "NEARLINE_NAMESPACE", "NEARLINE_MODEL_REPOSITORY", "NEARLINE_RUN_MODEL"):
        assert var in done.stdout


def test_models_list_names_a_model_it_cannot_load_and_skips_folders_that_are_not_model_names(tmp_path: Path) -> None:
    from tests.tiny_model import broken_repository

    repository = broken_repository(tmp_path / "models")
    (repository / "Not..A.Name" / "1").mkdir(parents=True)
    done = nearline("models", "list", "--model-repository", str(repository))
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert [r[:3] for r in rows] == [
        ["badcfg", "1", "unavailable"],
        ["badtok", "1", "text-embedding"],
        ["tiny", "1", "text-embedding"],
    ]
    assert rows[0][3].startswith("model unavailable: badcfg version 1: ")


@pytest.mark.parametrize("worker", [["gpu", "--model", "tiny"], ["preprocess"], ["scheduler"]])
def test_a_metrics_port_that_is_taken_is_named_with_exit_code_2_before_anything_connects(worker: list[str]) -> None:
    import os
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # the deployments' variable, as every worker reads it
        env = {**os.environ, "NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1", "NEARLINE_METRICS_PORT": str(port)}
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "worker", *worker], env=env, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 2, done.stderr
    assert f"--metrics-port {port}: " in done.stderr and "in use" in done.stderr
    assert "Traceback" not in done.stderr


def test_every_worker_lists_its_metrics_port_option_and_variable() -> None:
    for worker in ("gpu", "preprocess", "scheduler"):
        done = nearline("worker", worker, "--help")
        assert "--metrics-port" in done.stdout and "NEARLINE_METRICS_PORT" in done.stdout
