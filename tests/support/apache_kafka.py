"""A single-node Apache Kafka (KRaft, data on disk) on loopback, for the tests whose guarantees
depend on the broker and for the benchmarks' `--broker kafka`; and a secured one (`security=`):
SASL_SSL with SCRAM-SHA-512 logins, a mutual-TLS listener, and Kafka's StandardAuthorizer with
no ACL meaning denied (tests/support/kafka_security.py makes its certificates and users).

The jars come from Maven Central through `.ci/kafka/pom.xml`; `.ci/setup --tests` copies them into
a cache outside the repository (kafka_lib()). The broker runs as `kafka.Kafka` on a log folder
formatted by `kafka.tools.StorageTool`, as Kafka's own scripts do; `restart()` starts it again on
the same folder and ports, so its logs, committed offsets and transactions survive, unlike Tansu's.
"""

from __future__ import annotations

import base64
import os
import random
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kafka_io.clients import check_reachable
from kafka_io.errors import BrokerUnavailableError
from kafka_io.settings import KafkaSettings
from runtime.children import die_with_parent
from tests.support.kafka_security import Security

KAFKA_VERSION = "4.1.1"  # keep in step with .ci/kafka/pom.xml

# Stock broker settings but for what one node needs (replication factors of 1) and what makes a
# test session quick without changing a guarantee: fewer internal partitions, no initial
# rebalance delay, and session timeouts down to 1 s allowed (the workers default to 6 s). Under
# Kafka 4's consumer group protocol (KIP-848, `--group-protocol consumer`) the session is the
# broker's alone, 45 s by default and no less than 45 s allowed: 6 s here, as the classic
# protocol's workers ask for, so a killed member's partitions move in a trial's seconds under
# either protocol (docs/brokers.md says what a cluster's operators set).
SERVER_SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "5",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "1000",
    "num.partitions": "1",
}

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.state.name = state.change.logger
logger.state.level = warn
"""


def kafka_lib() -> Path:
    """The folder of the broker's jars, or BrokerUnavailableError saying how to get them."""
    override = os.environ.get("NEARLINE_KAFKA_LIB")
    cache = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    lib = Path(override) if override else base / "nearline" / f"kafka-{KAFKA_VERSION}" / "lib"
    if not (lib / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        raise BrokerUnavailableError(
            f"Apache Kafka {KAFKA_VERSION} is not in {lib}: run `bash .ci/setup --tests` (it fetches it with Maven)"
        )
    return lib


def server_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, below Linux's ephemeral range (32768-60999 by default)."""
    rng = random.Random()
    while True:
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port


def _java(*args: str) -> list[str]:
    # -Xmx: one node of test traffic; Kafka's scripts default to 1 GiB, this machine has 2 cores and 24 GiB
    return ["java", "-Xms128m", "-Xmx768m", "-XX:+UseSerialGC", "-cp", f"{kafka_lib()}/*", *args]


def cluster_id() -> str:
    """A random cluster id in Kafka's form of a UUID (URL-safe base64, no padding), drawn again
    when it starts with "-", as Kafka's Uuid.randomUuid does: the format command's parser took
    such an id for an option ("--cluster-id/-t: expected one argument"), one broker start in 64."""
    while True:
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster.startswith("-"):
            return cluster


@dataclass
class ApacheKafka:
    """One KRaft node: broker and controller in one JVM, its data in `folder`/data."""

    folder: Path
    port: int
    controller_port: int
    host: str = "127.0.0.1"
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    starts: int = 0
    # secured: `port` is the SASL_SSL listener, `tls_port` the mutual-TLS one
    security: Security | None = field(default=None, repr=False)
    tls_port: int = 0

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def tls_bootstrap_servers(self) -> str:
        """The mutual-TLS listener (secured only): the principal is the client certificate's subject."""
        return f"{self.host}:{self.tls_port}"

    def admin_settings(self) -> KafkaSettings:
        """Settings of a client that may do anything: the super user on a secured node."""
        if self.security is None:
            return KafkaSettings(self.bootstrap_servers)
        return KafkaSettings(self.bootstrap_servers, extra=self.security.sasl_client("admin"))

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the broker was never started"
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        return self.folder / f"broker{self.starts}.log"

    @classmethod
    def start(cls, folder: Path, ready_timeout_s: float = 90.0, security: Security | None = None) -> ApacheKafka:
        """Format `folder`/data (once) and start the node; returns once it answers metadata. Its
        ports are free ones below the ephemeral range, where no client's outgoing connection
        can take one between the pick and the JVM's bind (or its restart's); a port some other
        server took meanwhile is picked again. With `security`, the node is secured (the module's
        docstring), its SCRAM users made at format time."""
        folder.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):
            broker = cls(folder, server_port(), server_port(), security=security)
            if security is not None:
                broker.tls_port = server_port()
            broker._format()
            try:
                broker.restart(ready_timeout_s)
                return broker
            except BrokerUnavailableError as exc:
                if "Address already in use" not in str(exc) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _properties(self) -> Path:
        settings = {
            **SERVER_SETTINGS,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "log.dirs": str(self.folder / "data"),
        }
        if self.security is not None:
            settings.update(self.security.server_settings(self.host, self.port, self.tls_port, self.controller_port))
        path = self.folder / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
        return path

    def _format(self) -> None:
        if (self.folder / "data" / "meta.properties").is_file():
            return
        scram = self.security.format_args() if self.security is not None else []
        done = subprocess.run(
            _java("kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", str(self._properties()), *scram),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise BrokerUnavailableError(f"formatting {self.folder / 'data'} failed: {done.stdout}{done.stderr}")

    def restart(self, ready_timeout_s: float = 90.0) -> None:
        """Start the node on its folder and ports (after stop() or kill(): the same data)."""
        if self.alive():
            raise RuntimeError(f"the broker on {self.bootstrap_servers} is running")
        self.starts += 1
        config = self.folder / "log4j2.properties"
        config.write_text(LOG4J2.format(log=self.log_path, level="INFO"), encoding="utf-8")
        with (self.folder / f"stdout{self.starts}.log").open("ab") as out:
            self.proc = subprocess.Popen(
                _java(f"-Dlog4j2.configurationFile={config}", "kafka.Kafka", str(self._properties())),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGKILL),  # never outlive the test session
            )
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerUnavailableError(
                    f"Apache Kafka exited with code {self.proc.returncode} at start ({self.log_path}):\n{self._tail()}"
                )
            try:
                check_reachable(self.admin_settings(), timeout_s=2.0)
                return
            except BrokerUnavailableError:
                time.sleep(0.2)
        self.kill()
        raise BrokerUnavailableError(
            f"Apache Kafka did not answer on {self.bootstrap_servers} in {ready_timeout_s} s:\n{self._tail()}"
        )

    def _tail(self, lines: int = 30) -> str:
        text = "".join(
            p.read_text(errors="replace")
            for p in (self.log_path, self.folder / f"stdout{self.starts}.log")
            if p.is_file()
        )
        return "\n".join(text.splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 30.0) -> None:
        """A clean shutdown (SIGTERM: Kafka flushes and closes its logs), SIGKILL after `timeout_s`."""
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL: what a crashed host looks like; the data on disk is recovered at the next start."""
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()
