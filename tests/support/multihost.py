"""A nearline cluster on hosts of bench.hosts: the broker, workers, the CLI and a record probe, each
run in its own host (network namespace) by `ip netns exec`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.hosts import Layout, Topology, broker_running
from jobs.job_input import ENV_PACK_RECORDS
from jobs.launch.local import ENV_MODEL_REPOSITORY, PREPROCESS_ENV, WorkerProcess, spawn_worker, stop_all
from kafka_io.settings import ENV_BOOTSTRAP
from kafka_io.topology import ENV_NAMESPACE, Topics
from runtime.children import die_with_parent
from tests.support.job_checks import assert_exactly_one_result_each, assert_status_is_exact
from tests.support.waiting import wait_until


@dataclass(frozen=True)
class Event:
    """One line of tests/support/record_probe.py."""

    t: float
    kind: str
    key: str = ""  # tensor: job_id/record_id
    partition: int = -1
    job: str = ""
    id: str = ""
    worker: int = 0
    started_us: int = 0


class Probe:
    """record_probe.py in the client host; its lines are gathered by a thread as they come."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=self._log, text=True, preexec_fn=die_with_parent()
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = Event(**json.loads(line))
            with self._lock:
                self._events.append(event)

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def results(self, job: str | None = None) -> list[Event]:
        return [e for e in self.events() if e.kind == "result" and (job is None or e.job == job)]

    def partitions(self) -> dict[str, int]:
        """tensor key (job/record) -> the partition of the tensor topic it is in"""
        return {e.key: e.partition for e in self.events() if e.kind == "tensor"}

    def wait(self, what: str, until: Callable[[], bool], timeout_s: float, check: Callable[[], None]) -> None:
        def alive() -> None:
            if self.process.poll() is not None:
                raise RuntimeError(f"the record probe exited with code {self.process.returncode}")
            check()

        wait_until(until, timeout_s, what, meanwhile=alive)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._thread.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


@dataclass
class Cluster:
    net: Topology
    topics: Topics
    repository: Path
    logs: Path
    broker: subprocess.Popen[str] | None = None
    workers: dict[str, WorkerProcess] = field(default_factory=dict)
    probes: list[Probe] = field(default_factory=list)
    _stack: ExitStack = field(default_factory=ExitStack)
    # texts a submit packs together (jobs.job_input.pack_limits_from_env); None: the product's default
    pack_records: int | None = None

    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            ENV_BOOTSTRAP: self.net.bootstrap_servers,
            ENV_NAMESPACE: self.topics.namespace,
            ENV_MODEL_REPOSITORY: str(self.repository),
        }
        if self.pack_records is not None:
            env[ENV_PACK_RECORDS] = str(self.pack_records)
        return env

    def start_broker(self) -> None:
        """Tansu in the broker host, listening on and advertising its address there."""
        self.broker = self._stack.enter_context(broker_running(self.net, self.logs / "broker.log"))

    def start(self, host: str, *args: str) -> WorkerProcess:
        """`nearline worker ARGS` in `host`, logging at INFO (assignments and revocations)."""
        worker = spawn_worker(
            host,
            list(args),
            bootstrap_servers=self.net.bootstrap_servers,
            namespace=self.topics.namespace,
            repository=self.repository,
            log_path=self.logs / f"{host}-{args[0]}.log",
            extra_env={"NEARLINE_LOG_LEVEL": "INFO", **(PREPROCESS_ENV if args[0] == "preprocess" else {})},
            python=self.net.host(host).command(sys.executable),
        )
        self.workers[host] = worker
        return worker

    def cli(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        """`nearline ARGS` in the client host."""
        argv = self.net.host("client").command(sys.executable, "-m", "jobs.cli", *args)
        return subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=timeout_s)

    def probe(self, model: str) -> Probe:
        argv = self.net.host("client").command(sys.executable, "-m", "tests.support.record_probe", model)
        probe = Probe(argv, self.env(), self.logs / "probe.log")
        self.probes.append(probe)
        probe.wait("the probe follows the topics", lambda: bool(probe.events()), 60, self.check_workers)
        return probe

    def check_workers(self) -> None:
        for w in self.workers.values():
            w.check_alive()

    def stop(self) -> None:
        for probe in self.probes:
            probe.close()
        stop_all([w for w in self.workers.values() if w.process.poll() is None])
        self._stack.close()


@contextmanager
def cluster(layout: Layout, topics: Topics, repository: Path, logs: Path) -> Iterator[Cluster]:
    """A fresh topology and a Cluster on it, both torn down on the way out (whatever happened)."""
    with Topology(layout) as net:
        c = Cluster(net, topics, repository, logs)
        try:
            yield c
        finally:
            c.stop()


def submit(c: Cluster, rows: list[dict[str, str]], path: Path) -> str:
    """`nearline submit` in the client host; the job id."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    done = c.cli("submit", str(path), "--model", "tiny")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def assert_completed_exactly_once(c: Cluster, job_id: str, ids: list[str], out: Path) -> None:
    """`nearline status`: completed, exact counts; `nearline results`: every record once, in order."""
    assert_status_is_exact(c, job_id, len(ids))
    assert_exactly_one_result_each(c, job_id, ids, out)
