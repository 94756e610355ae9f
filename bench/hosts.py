"""Hosts as network namespaces on this machine: a broker, a client, preprocess and GPU hosts.

    with Topology(Layout(preprocess=1, gpus=3)) as net:
        subprocess.Popen(net.host("gpu1").command("python", "-m", "jobs.cli", "worker", "gpu", ...))
        net.cut("gpu1"); ...; net.restore("gpu1")          # its link down, then up again
        with net.impaired(["gpu1", "gpu2"], delay_s=0.05, loss=0.01): ...

Each host is a network namespace whose one interface, eth0, is cabled (a veth pair) to a port of
a bridge in a switch namespace, which also routes between the two segments:

    core  10.77.0.0/24, gateway .1:  broker .2, client .3, prep1, prep2, ... .11, .12, ...
    gpu   10.77.1.0/24, gateway .1:  gpu1, gpu2, ... .11, .12, ...

A process run in a host (`ip netns exec`, Host.command) has that host's address as its only
non-loopback one, so every connection it makes comes from it; the broker listens on and
advertises 10.77.0.2. Nothing is added to the root namespace, and nothing in the namespaces has a
route out of the machine: the switch namespace knows the two segments only.

Faults: cut() sets the host's switch port down, so the host's packets vanish silently (no FIN,
no RST), as when a cable or a switch port fails; restore() sets it up again. impaired() delays
and drops the packets between some hosts and another (bench/impair.py: this kernel has no netem).

Every namespace is named `nlh<pid>-<host>`, pid being the process that built the topology: the
next topology removes the leftovers of a run that died without tearing down (SIGKILL, a crash)
once that pid has gone, and killing the processes left in them first. `python -m bench.hosts
cleanup` does the same by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from bench.procfs import cpu_seconds
from runtime.children import die_with_parent

PREFIX = "nlh"
NETWORK = "10.77"
BROKER_PORT = 9092
SEGMENTS = {"core": 0, "gpu": 1}  # bridge name -> third octet
_OURS = re.compile(rf"^{PREFIX}(\d+)-")
_IMPAIR_TABLE = "77"
_IMPAIR_DEVICE = "impair"
_LIVE: set[str] = set()  # namespaces of topologies this process has up now


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    segment: str
    address: str
    port: str  # its veth end in the switch namespace

    def command(self, *argv: str) -> list[str]:
        """argv run in this host: `ip netns exec` keeps the working directory and the environment."""
        return ["ip", "netns", "exec", self.namespace, *argv]


@dataclass(frozen=True)
class Layout:
    preprocess: int = 1
    gpus: int = 2

    def hosts(self) -> list[tuple[str, str, int]]:
        """(name, segment, last octet) of every host."""
        return [
            ("broker", "core", 2),
            ("client", "core", 3),
            *((f"prep{i}", "core", 10 + i) for i in range(1, self.preprocess + 1)),
            *((f"gpu{i}", "gpu", 10 + i) for i in range(1, self.gpus + 1)),
        ]


@dataclass
class Impairment:
    """What bench/impair.py did, filled in when the impairment ends."""

    delay_s: float
    loss: float
    forwarded: int = 0
    dropped: int = 0


@dataclass
class Topology:
    layout: Layout = field(default_factory=Layout)
    run: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def switch(self) -> str:
        return f"{self.run}-switch"

    @property
    def broker(self) -> Host:
        return self.hosts["broker"]

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.broker.address}:{BROKER_PORT}"

    def host(self, name: str) -> Host:
        return self.hosts[name]

    def of_kind(self, kind: str) -> list[Host]:
        """The hosts named kind1, kind2, ... (gpu, prep)."""
        return [h for n, h in self.hosts.items() if re.fullmatch(rf"{kind}\d+", n)]

    def __enter__(self) -> Topology:
        remove_leftovers()
        _LIVE.update(self._namespaces())
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.teardown()

    def _namespaces(self) -> list[str]:
        return [self.switch, *(f"{self.run}-{name}" for name, _, _ in self.layout.hosts())]

    def _build(self) -> None:
        sw = self.switch
        _ip("netns", "add", sw)
        _ip("-n", sw, "link", "set", "lo", "up")
        _sysctl(sw, "net.ipv4.ip_forward", "1")
        # Impaired packets come back in on the TUN device with a source the main table routes
        # out of a bridge: reverse-path filtering would drop them.
        for conf in ("all", "default"):
            _sysctl(sw, f"net.ipv4.conf.{conf}.rp_filter", "0")
        for bridge, octet in SEGMENTS.items():
            _ip("-n", sw, "link", "add", bridge, "type", "bridge")
            _ip("-n", sw, "addr", "add", f"{NETWORK}.{octet}.1/24", "dev", bridge)
            _ip("-n", sw, "link", "set", bridge, "up")
        for name, segment, last in self.layout.hosts():
            host = Host(name, f"{self.run}-{name}", segment, f"{NETWORK}.{SEGMENTS[segment]}.{last}", f"p-{name}")
            _ip("netns", "add", host.namespace)
            _ip("-n", host.namespace, "link", "set", "lo", "up")
            _ip("-n", sw, "link", "add", host.port, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
            _ip("-n", sw, "link", "set", host.port, "master", segment, "up")
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.namespace, "link", "set", "eth0", "up")
            _ip("-n", host.namespace, "route", "add", "default", "via", f"{NETWORK}.{SEGMENTS[segment]}.1")
            self.hosts[name] = host

    def teardown(self) -> None:
        """Kill what still runs in the namespaces (started by us, into them), then delete them."""
        for namespace in self._namespaces():
            _delete_namespace(namespace)
            _LIVE.discard(namespace)

    def cpu_seconds(self, name: str) -> float:
        """User + system CPU time of the processes running in the host now (so far in their lives)."""
        total = 0.0
        for pid in _pids(self.hosts[name].namespace):
            with suppress(OSError, IndexError):  # it has just ended
                total += cpu_seconds(int(pid))
        return total

    def cut(self, name: str) -> None:
        """The host's link goes down: its packets are dropped at the switch, nobody is told."""
        _ip("-n", self.switch, "link", "set", self.hosts[name].port, "down")

    def restore(self, name: str) -> None:
        _ip("-n", self.switch, "link", "set", self.hosts[name].port, "up")

    @contextmanager
    def impaired(
        self, names: list[str], peer: str = "broker", *, delay_s: float, loss: float, seed: int | None = None
    ) -> Iterator[Impairment]:
        """Every packet between each of `names` and `peer`, both ways, is held delay_s and dropped
        with probability `loss` (as `netem delay D loss L` on both ends of the path would)."""
        sw, impairment = self.switch, Impairment(delay_s, loss)
        argv = [sys.executable, str(Path(__file__).with_name("impair.py")), "--device", _IMPAIR_DEVICE]
        argv += ["--delay-ms", str(delay_s * 1000), "--loss", str(loss)]
        argv += ["--seed", str(seed)] if seed is not None else []
        relay = subprocess.Popen(
            ["ip", "netns", "exec", sw, *argv], stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent()
        )
        rules: list[tuple[str, ...]] = [("iif", _IMPAIR_DEVICE, "lookup", "main", "pref", "100")]  # relayed: deliver
        for name in names:
            a, b = self.hosts[name].address, self.hosts[peer].address
            rules += [("from", a, "to", b, "lookup", _IMPAIR_TABLE, "pref", "110")]
            rules += [("from", b, "to", a, "lookup", _IMPAIR_TABLE, "pref", "110")]
        added: list[tuple[str, ...]] = []
        try:
            assert relay.stdout is not None
            if relay.stdout.readline().strip() != "ready":
                raise RuntimeError(f"bench/impair.py did not start (exit {relay.wait()})")
            _ip("-n", sw, "link", "set", _IMPAIR_DEVICE, "up")
            _ip("-n", sw, "route", "add", "default", "dev", _IMPAIR_DEVICE, "table", _IMPAIR_TABLE)
            for rule in rules:
                _ip("-n", sw, "rule", "add", *rule)
                added.append(rule)
            yield impairment
        finally:
            for rule in reversed(added):  # traffic takes the direct route again first
                _ip("-n", sw, "rule", "del", *rule)
            relay.send_signal(signal.SIGTERM)
            out, _ = relay.communicate(timeout=10)
            lines = out.strip().splitlines()
            if lines and lines[-1].startswith("{"):
                counts = json.loads(lines[-1])
                impairment.forwarded, impairment.dropped = counts["forwarded"], counts["dropped"]


def remove_leftovers() -> list[str]:
    """Delete namespaces of topologies whose process has gone (and this process's, if not live)."""
    removed = []
    for namespace in _list_namespaces():
        match = _OURS.match(namespace)
        if match is None or namespace in _LIVE:
            continue
        pid = int(match.group(1))
        if pid != os.getpid() and _alive(pid):
            continue  # another run's, still up
        _delete_namespace(namespace)
        removed.append(namespace)
    return removed


def _list_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _delete_namespace(namespace: str) -> None:
    if namespace not in _list_namespaces():
        return
    pids = _pids(namespace)
    for pid in pids:  # only processes started into our namespaces run there
        with suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(_alive(int(p)) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    _ip("netns", "del", namespace)  # its veth ends go with it, and so the pairs


def _pids(namespace: str) -> list[str]:
    return subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _sysctl(namespace: str, key: str, value: str) -> None:
    path = "/proc/sys/" + key.replace(".", "/")
    subprocess.run(["ip", "netns", "exec", namespace, "sh", "-c", f"echo {value} > {path}"], check=True)


@contextmanager
def broker_running(net: Topology, log_path: Path) -> Iterator[subprocess.Popen[str]]:
    """The embedded broker in the broker host (serve_broker, below), stopped on the way out."""
    host = net.broker
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = host.command(sys.executable, "-m", "bench.hosts", "broker", host.address, str(BROKER_PORT), str(log_path))
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent())
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the broker did not start in host {host.name} (exit {process.wait()}); see {log_path}")
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
        process.communicate(timeout=15)  # and closes its pipe


def serve_broker(address: str, port: int, log_path: Path) -> None:
    """The embedded broker on address:port, until SIGTERM: run in the broker host, where the
    readiness check can reach that address."""
    from kafka_io.broker import EmbeddedBroker

    broker = EmbeddedBroker.start(log_path, port=port, host=address)
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    print("ready", flush=True)
    try:
        while not stopping and broker.alive():
            time.sleep(0.1)
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("cleanup", help="remove the namespaces of runs that died without tearing down")
    serve = sub.add_parser("broker", help="run the embedded broker on ADDRESS:PORT until SIGTERM")
    serve.add_argument("address")
    serve.add_argument("port", type=int)
    serve.add_argument("log", type=Path)
    args = parser.parse_args()
    if args.command == "cleanup":
        for namespace in remove_leftovers():
            print(f"removed {namespace}")
    else:
        serve_broker(args.address, args.port, args.log)


if __name__ == "__main__":
    main()
