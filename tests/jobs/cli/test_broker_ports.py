"""`nearline broker start` and `stop` name a broker by its port: a second shell's start on another
port gets a broker of its own, and a stop stops only the broker started on its --port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_io.broker import EmbeddedBroker, free_port, state_path


def broker(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}  # `nearline broker` keeps its state in ~/.nearline
    command = [sys.executable, "-m", "jobs.cli", "broker", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def alive(home: Path, port: int) -> bool:
    started = EmbeddedBroker.load(state_path(home / ".nearline", port))
    return started is not None and started.alive()


@pytest.mark.process
def test_each_port_has_its_broker_and_a_stop_stops_only_the_one_on_its_port(tmp_path: Path) -> None:
    first, second = free_port(), free_port()
    try:
        assert broker(tmp_path, "start", "--port", str(first)).returncode == 0
        other = broker(tmp_path, "start", "--port", str(second))  # another shell: its port is not dropped
        assert other.returncode == 0, other.stderr
        assert other.stdout.strip() == f"export NEARLINE_BOOTSTRAP_SERVERS=127.0.0.1:{second}"
        assert f"note: a local broker runs on port {first} too" in other.stderr
        again = broker(tmp_path, "start", "--port", str(second))
        assert again.returncode == 0 and f"already running on port {second}" in again.stderr
        assert again.stdout.strip() == f"export NEARLINE_BOOTSTRAP_SERVERS=127.0.0.1:{second}"

        unnamed = broker(tmp_path, "stop", "--port", str(free_port()))  # no broker there: nothing is stopped
        assert unnamed.returncode == 1, unnamed.stderr
        assert "no local broker on port" in unnamed.stderr and f"port {first} (pid" in unnamed.stderr
        assert alive(tmp_path, first) and alive(tmp_path, second)

        stopped = broker(tmp_path, "stop", "--port", str(first))
        assert stopped.returncode == 0 and f"on port {first}" in stopped.stderr, stopped.stderr
        assert not alive(tmp_path, first) and alive(tmp_path, second)
    finally:
        for port in (first, second):
            broker(tmp_path, "stop", "--port", str(port))
    assert not alive(tmp_path, second)
    none = broker(tmp_path, "stop")
    assert none.returncode == 0 and "no local broker is running" in none.stderr


@pytest.mark.process
def test_a_port_another_program_listens_on_is_refused_with_exit_3(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = broker(tmp_path, "start", "--port", str(port))
    assert done.returncode == 3 and f"port {port} is taken by a program" in done.stderr, done.stderr
    assert not state_path(tmp_path / ".nearline", port).exists()
