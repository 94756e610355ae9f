"""Network faults between hosts (network namespaces, bench/hosts.py), with real worker processes.

Each trial builds its own hosts and starts its own broker in the broker host (never the session's
broker or $KAFKA_BOOTSTRAP_SERVERS): the broker, the preprocess worker, the GPU workers, the CLI
and a record probe (tests/support/record_probe.py) each run in their own host. Each trial ends with
every record in `nearline results` exactly once and the job `completed` in `nearline status`, and
prints how long recovery took (run with -s to see it). Needs root.

GPU workers run with the product's group settings (session 6 s, heartbeat 1 s; Tansu holds a join
for half the session). In trials a and c they take one record per poll window with one window in
flight (PACED, and the job submitted in packs of one record: a window never splits a pack, #41):
each record then waits for its result's delivery and its commit, ~100 records/s per
worker while the CPU mostly idles, so a job of a few thousand records outlasts the fault and its
recovery without the 2-core machine being the clock. Trial b runs them with their defaults.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.hosts import Layout, Topology
from kafka_io.topology import Topics
from tests.support.inputs import example_lines
from tests.support.multihost import Cluster, Event, Probe, assert_completed_exactly_once, cluster, submit
from tests.support.tiny_model import TinyModel

PACED = ("--max-batch-size", "1", "--max-window", "1", "--max-windows-in-flight", "1")

pytestmark = [
    pytest.mark.long,
    # one subnet (bench/hosts.py), and a topology removes leftover namespaces: one test process only
    pytest.mark.xdist_group("network-namespaces"),
    pytest.mark.skipif(
        shutil.which("ip") is None or os.geteuid() != 0, reason="hosts are network namespaces: needs root and iproute2"
    ),
]


def rows_of(n: int) -> list[dict[str, str]]:
    lines = example_lines(1200)
    return [{"id": f"{k}-{r['id']}", "text": r["text"]} for k in range(n // len(lines) + 1) for r in lines][:n]


@pytest.fixture
def hosts(
    request: pytest.FixtureRequest, topics: Topics, tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> Iterator[Cluster]:
    layout: Layout = request.param
    with cluster(layout, topics, model_repository, tmp_path / "logs") as c:
        c.start_broker()
        yield c


def done_ids(probe: Probe, job: str) -> set[str]:
    return {e.id for e in probe.results(job)}


def wait_done(c: Cluster, probe: Probe, job: str, n: int, timeout_s: float) -> float:
    """Until every record of the job has a result; when the last one came (probe clock)."""
    probe.wait(f"all {n} results of {job}", lambda: len(done_ids(probe, job)) >= n, timeout_s, c.check_workers)
    return max(e.t for e in probe.results(job))


def copies(probe: Probe, job: str) -> int:
    """Results of the job beyond one per record: redelivered records, which every reader drops."""
    return len(probe.results(job)) - len(done_ids(probe, job))


def first(events: list[Event]) -> Event | None:
    return min(events, key=lambda e: e.t, default=None)


@pytest.mark.parametrize("hosts", [Layout(preprocess=1, gpus=3)], indirect=True)
def test_a_gpu_host_whose_link_goes_down_mid_job_hands_over_its_partitions_and_rejoins(
    hosts: Cluster, tmp_path: Path
) -> None:
    c = hosts
    c.start("prep1", "preprocess")
    c.pack_records = 1  # PACED: a window of one record
    gpus = {h: c.start(h, "gpu", "--model", "tiny", *PACED) for h in ("gpu1", "gpu2", "gpu3")}
    victim = gpus["gpu2"].process.pid
    probe = c.probe("tiny")
    rows = rows_of(6000)
    job = submit(c, rows, tmp_path / "job.jsonl")
    every = {w.process.pid for w in gpus.values()}
    probe.wait(
        "results from all three GPU hosts", lambda: {e.worker for e in probe.results(job)} >= every, 90, c.check_workers
    )

    cut_at = time.monotonic()
    c.net.cut("gpu2")  # no FIN, no RST: the group notices by its session timeout
    key = f"{job}/{{}}"

    def taken_over() -> Event | None:
        where = probe.partitions()
        # the partitions of its last results before the cut (an earlier rebalance may have moved others)
        recent = sorted((e for e in probe.results(job) if e.worker == victim and e.t < cut_at), key=lambda e: e.t)
        held = {where.get(key.format(e.id)) for e in recent[-20:]}
        moved = [e for e in probe.results(job) if e.t > cut_at and e.worker != victim]
        return first([e for e in moved if where.get(key.format(e.id)) in held])

    probe.wait("another host consumes the cut host's partitions", lambda: taken_over() is not None, 90, c.check_workers)
    takeover = taken_over()
    assert takeover is not None
    assert len(done_ids(probe, job)) < len(rows), "the job ended before the takeover: make it longer"

    restored_at, restored_wall = time.monotonic(), time.time()
    c.net.restore("gpu2")

    def fresh_from_victim() -> list[Event]:  # run after the link came back, not a late delivery
        return [e for e in probe.results() if e.worker == victim and e.started_us > restored_wall * 1e6]

    probe.wait(
        "the cut host rejoins, or the job ends",
        lambda: bool(fresh_from_victim()) or len(done_ids(probe, job)) >= len(rows),
        120,
        c.check_workers,
    )
    jobs = {job: rows}
    if not fresh_from_victim():  # it rejoined after the job's last records: give it work
        more = rows_of(1200)
        jobs[submit(c, more, tmp_path / "more.jsonl")] = more
        probe.wait("the cut host rejoins", lambda: bool(fresh_from_victim()), 120, c.check_workers)
    rejoined = first(fresh_from_victim())
    assert rejoined is not None
    for job_id, job_rows in jobs.items():
        wait_done(c, probe, job_id, len(job_rows), 180)
        assert_completed_exactly_once(c, job_id, [r["id"] for r in job_rows], tmp_path / f"{job_id}.jsonl")
    when = "mid-job" if len(jobs) == 1 else "in a second job"
    print(
        f"\ntrial a (GPU host cut off): its partitions consumed by another host {takeover.t - cut_at:.1f} s after "
        f"the link went down; back {restored_at - cut_at:.1f} s after it, the host produced results again "
        f"{rejoined.t - restored_at:.1f} s after its link came up ({when}); {copies(probe, job)} results written "
        "twice (readers keep one)"
    )


@pytest.mark.parametrize("hosts", [Layout(preprocess=1, gpus=2)], indirect=True)
def test_a_whole_job_over_50_ms_and_1_percent_loss_between_the_gpu_hosts_and_the_broker(
    hosts: Cluster, tmp_path: Path
) -> None:
    c = hosts
    c.start("prep1", "preprocess")
    gpus = {c.start(h, "gpu", "--model", "tiny").process.pid for h in ("gpu1", "gpu2")}
    probe = c.probe("tiny")
    rows = rows_of(2400)
    ids = [r["id"] for r in rows]
    took: dict[str, float] = {}  # from submit to the last result
    span: dict[str, float] = {}  # from the first result to the last: the GPU hosts' part

    def run_job(name: str, rows: list[dict[str, str]]) -> str:
        started = time.monotonic()
        job = submit(c, rows, tmp_path / f"{name}.jsonl")
        took[name] = wait_done(c, probe, job, len(rows), 240) - started
        span[name] = took[name] + started - min(e.t for e in probe.results(job))
        return job

    run_job("warm-up", rows[:400])  # absorbs the group's first join (Tansu holds it ~3 s)
    clean = run_job("clean", rows)  # the same job on the clean network, for comparison
    with c.net.impaired(["gpu1", "gpu2"], delay_s=0.05, loss=0.01, seed=14) as impairment:
        job = run_job("impaired", rows)
    assert {e.worker for e in probe.results(job)} == gpus  # both GPU hosts worked through it
    assert_completed_exactly_once(c, clean, ids, tmp_path / "clean-results.jsonl")
    assert_completed_exactly_once(c, job, ids, tmp_path / "impaired-results.jsonl")
    print(
        f"\ntrial b (50 ms each way, 1% loss each way, GPU hosts <-> broker): {len(rows)} records in "
        f"{took['impaired']:.1f} s from submit to the last result ({span['impaired']:.1f} s from the first result), "
        f"against {took['clean']:.1f} s ({span['clean']:.1f} s) on the clean network; the relay dropped "
        f"{impairment.dropped} of {impairment.forwarded + impairment.dropped} packets"
    )


@pytest.mark.parametrize("hosts", [Layout(preprocess=1, gpus=2)], indirect=True)
def test_the_broker_host_unreachable_for_10_s_mid_job_loses_and_doubles_nothing(hosts: Cluster, tmp_path: Path) -> None:
    c = hosts
    c.pack_records = 1  # PACED: a window of one record
    c.start("prep1", "preprocess")
    for h in ("gpu1", "gpu2"):
        c.start(h, "gpu", "--model", "tiny", *PACED)
    probe = c.probe("tiny")
    rows = rows_of(3000)
    job = submit(c, rows, tmp_path / "job.jsonl")
    probe.wait("a quarter of the job", lambda: len(done_ids(probe, job)) >= len(rows) // 4, 90, c.check_workers)
    cut_at = time.monotonic()
    c.net.cut("broker")
    time.sleep(10)  # the fault's length: the outage is what is being tested, not a wait for an outcome
    c.check_workers()
    restored_at, restored_wall = time.monotonic(), time.time()
    c.net.restore("broker")
    assert len(done_ids(probe, job)) < len(rows), "the job ended before the outage: make it longer"

    def resumed() -> Event | None:
        return first([e for e in probe.results(job) if e.started_us > restored_wall * 1e6])

    probe.wait("results again after the outage", lambda: resumed() is not None, 120, c.check_workers)
    back = resumed()
    assert back is not None
    wait_done(c, probe, job, len(rows), 180)
    assert_completed_exactly_once(c, job, [r["id"] for r in rows], tmp_path / "results.jsonl")
    print(
        f"\ntrial c (broker host unreachable for {restored_at - cut_at:.1f} s): new results "
        f"{back.t - restored_at:.1f} s after the broker came back; {copies(probe, job)} results written twice "
        "(readers keep one)"
    )


# a listener in the broker host, and a client that exits 1 when it cannot connect within 2 s
ECHO = """
import socket
server = socket.create_server(("{}", 9092))
print("ready", flush=True)
while True:
    server.accept()[0].close()
"""
CONNECT = """
import socket, sys
try:
    socket.create_connection(("{}", 9092), timeout=2).close()
except OSError:
    sys.exit(1)
"""


def test_the_relay_carries_the_impaired_traffic_and_a_total_loss_cuts_it() -> None:
    with Topology(Layout(preprocess=0, gpus=2)) as net:
        server = subprocess.Popen(
            net.broker.command(sys.executable, "-c", ECHO.format(net.broker.address)), stdout=subprocess.PIPE, text=True
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"

            def connects(host: str) -> bool:
                argv = net.host(host).command(sys.executable, "-c", CONNECT.format(net.broker.address))
                return subprocess.run(argv).returncode == 0

            with net.impaired(["gpu1"], delay_s=0.01, loss=0.0) as slow:
                assert connects("gpu1") and connects("gpu2")
            with net.impaired(["gpu1"], delay_s=0.0, loss=1.0) as lossy:
                assert not connects("gpu1")
                assert connects("gpu2")  # only what is between gpu1 and the broker
            assert connects("gpu1")  # and the direct route is back
        finally:
            server.kill()
            server.communicate()
    assert slow.forwarded >= 3 and slow.dropped == 0  # SYN, SYN-ACK, ACK at least, both ways through it
    assert lossy.forwarded == 0 and lossy.dropped >= 1


def test_a_topology_removes_what_a_dead_run_left_and_leaves_nothing_behind() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid whose process has ended: a run that died without tearing down
    leftover = f"nlh{gone.pid}-gpu1"
    subprocess.run(["ip", "netns", "add", leftover], check=True)
    with Topology(Layout(preprocess=0, gpus=1)) as net:
        names = namespaces()
        assert leftover not in names
        assert {net.switch, *(h.namespace for h in net.hosts.values())} <= names
    assert not {n for n in namespaces() if n.startswith(net.run)}


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}
