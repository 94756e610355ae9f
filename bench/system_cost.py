"""Benchmark: the CPU the whole platform spends per text, against the one step it must do (tokenize).

    .venv/bin/python -m bench.system_cost [--records 30000] [--texts short paragraphs]
        [--engine zero-cost|torch] [--preprocess-workers N] [--model-repository PATH]

For each kind of text (short: the shipped example's sentences, the hard case where fixed per-record
costs dominate; paragraphs: the shipped example itself), on the embedded broker:
- a real preprocess worker and a GPU worker whose engine answers at once (a zero-cost simulated
  accelerator in the real worker loop, topics and serde: everything measured is CPU-side work),
  warmed with a 50-record job;
- `nearline submit INPUT --wait` of --records texts, then `nearline results JOB -o out.jsonl`;
- the CPU each process used meanwhile (workers and broker from /proc, submit and results from
  their own rusage), per record, and the worker threads that used most;
- in the same run, the limit: the model's own tokenizer on the same texts (`encode_batch`, 64 at
  a time, one thread, ids to bytes), per record.
Prints each stage's CPU per record, its ratio to the tokenizer's, and end-to-end records/s (from
the submit's start to the job's completion). Figures, never assertions: the machine is shared.

A miss's cost: `--fresh-texts` makes every text unique to the run, so that every lookup misses;
against the same with `--no-results-cache` (the preprocess workers' cache off: no key, lookup,
cache write or tail), what a miss adds. On Apache Kafka (`--broker kafka`) measure 300,000
records or more: over 30,000 the broker's JIT compiler threads are most of its CPU (its threads
are printed), which counts compiling the code a run first meets as a cost of each record.

On a GPU host (bench/gpu_check.sh): `--engine torch` runs the real torch engine in the GPU worker
instead, and the benchmark also prints the accelerator's busy fraction over the job (the time the
worker waited on the engine, over the submit's wall time); `--preprocess-workers N` runs N
preprocess workers in one group (the raw topics get at least N partitions), as many as the
host's cores allow, so that the CPU side has the cores to feed the device.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.bytecode import precompile
from bench.decoupling import EXAMPLE, exit_on_sigterm, machine
from bench.feed import short_texts
from bench.procfs import cpu_seconds
from jobs.launch.local import PREPROCESS_ENV, WorkerProcess, spawn_worker, stop_all
from jobs.launch.runner import ensure_model
from kafka_io.broker import EmbeddedBroker
from kafka_io.offsets import group_lag
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topics import DEFAULT_PARTITIONS, TopicSpec, ensure_topics, lanes
from kafka_io.topology import ENV_NAMESPACE, LANES, Topics
from model_repository.folders import ENV_MODEL_REPOSITORY, default_repository

if TYPE_CHECKING:
    from tests.support.apache_kafka import ApacheKafka

MODEL = "minilm"
NAMESPACE = "system-cost"
# The warm-up job waits out the workers' start-up, which submit's default --worker-grace-s (30 s)
# does not cover everywhere: the torch engine's warm-up (its largest batch, before the GPU worker
# joins its group) took 41 s at FP32 on the dry run's shared 2-core CPU (bench/gpu_dryrun.sh).
WARM_UP_GRACE_S = 150.0


def texts_of(kind: str, n: int) -> list[str]:
    if kind == "short":
        return short_texts(n)
    paragraphs = [json.loads(line)["text"] for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]
    return [paragraphs[i % len(paragraphs)] for i in range(n)]


def tokenizer_us(repository: Path, texts: list[str]) -> float:
    """The model's tokenizer alone, one thread, 64 texts a call, ids to bytes: microseconds a text."""
    os.environ["RAYON_NUM_THREADS"] = "1"  # read when the tokenizers thread pool starts: before first use
    from preprocess_app.models import load_tokenizer

    config = ensure_model(repository, MODEL, lambda line: None)
    assert config.tokenizer is not None
    tokenizer = load_tokenizer(config.tokenizer_path, config.tokenizer.max_length)
    started = time.process_time()
    for i in range(0, len(texts), 64):
        for encoding in tokenizer.encode_batch(texts[i : i + 64]):
            np.asarray(encoding.ids, dtype=np.uint16).tobytes()
    return (time.process_time() - started) / len(texts) * 1e6


def fresh_texts(texts: list[str]) -> list[str]:
    """Each text made unique, to this run too (its number and a salt of the run's appended): none
    is in the results cache, so each record's lookup misses, as a first run's do."""
    salt = secrets.token_hex(4)
    return [f"{text} ({salt}-{i})" for i, text in enumerate(texts)]


@dataclass(frozen=True)
class Command:
    wall_s: float
    cpu_s: float
    stdout: str


def timed_command(
    argv: list[str], env: dict[str, str], stderr_to: Path | None = None, pids: list[int] | None = None
) -> Command:
    """Run argv to its end; its wall time and the CPU it (and its children) used, from wait4.
    `stderr_to`: its stderr in that file (a .log there is shown when a run stalls or fails)."""
    started = time.monotonic()
    with (
        tempfile.TemporaryFile() as out,
        stderr_to.open("w+b") if stderr_to is not None else tempfile.TemporaryFile() as err,
    ):
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err)
        if pids is not None:
            pids.append(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[2:5])} exited {proc.returncode}:\n{stderr[-2000:]}")
    return Command(wall, usage.ru_utime + usage.ru_stime, stdout)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread name of a process so far (threads of one name summed)."""
    totals: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            totals[name] = totals.get(name, 0.0) + cpu_seconds(pid, int(task.name))
        except OSError:
            continue  # a thread that ended meanwhile
    return totals


def top_threads(before: dict[str, float], after: dict[str, float], records: int, n: int = 4) -> str:
    used = sorted(((after[k] - before.get(k, 0.0), k) for k in after), reverse=True)[:n]
    return ", ".join(f"{name} {cpu / records * 1e6:.0f}" for cpu, name in used if cpu > 0)


def gpu_worker_main(repository: Path, engine_kind: str, busy_path: Path) -> None:
    """The GPU worker in its own process, `serve` until SIGTERM: with a zero-cost engine, or with
    the real one (`torch`), timed, its busy seconds so far written to busy_path every 0.2 s."""
    from bench.feed import SimulatedAccelerator
    from bench.feed_engines import TimedEngine
    from gpu_consumer.engines.factory import make_engine
    from gpu_consumer.engines.protocol import Engine
    from gpu_consumer.worker import GpuWorkerSettings, serve
    from kafka_io.settings import KafkaSettings
    from kafka_io.topology import Topics
    from model_repository.folders import load_model_config

    exit_on_sigterm()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stall_report's question, as `nearline` answers it
    config = load_model_config(repository, MODEL)
    engine: Engine
    if engine_kind == "zero-cost":
        engine = SimulatedAccelerator(config, rate=0.0, per_call_s=0.0)
    else:
        timed = engine = TimedEngine(make_engine(config, engine_kind), engine_kind)

        def report() -> None:
            while True:
                busy_path.with_suffix(".tmp").write_text(str(timed.busy_s))
                busy_path.with_suffix(".tmp").replace(busy_path)
                time.sleep(0.2)

        threading.Thread(target=report, name="busy", daemon=True).start()
    serve(
        KafkaSettings(os.environ[ENV_BOOTSTRAP]), Topics(NAMESPACE), repository, GpuWorkerSettings(MODEL), engine=engine
    )


def busy_seconds(path: Path) -> float:
    try:
        return float(path.read_text())
    except (OSError, ValueError):
        return 0.0


# A measured job that has not completed after this long (plus a second per STALL_RECORDS_PER_S
# records) has stalled: without it, a stalled run on a device waits silently for its whole time limit.
STALL_AFTER_S = 90.0
STALL_RECORDS_PER_S = 500


def stall_report(workers: list[WorkerProcess], submit_pid: int | None, settings: KafkaSettings, work: Path) -> None:
    """What each process is doing: every thread's stack (SIGUSR1: `nearline` registers faulthandler,
    faust's worker answers with its own dump) into its log, each group's lag, the logs' tails."""
    print("system cost: the job stopped moving; asking each process for its stacks", file=sys.stderr, flush=True)
    for pid in [w.process.pid for w in workers] + ([submit_pid] if submit_pid else []):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR1)
    time.sleep(2)
    topics = Topics(NAMESPACE)
    for group, topic in [
        *((topics.preprocess_app_id, topics.lane(topics.raw_text, lane)) for lane in LANES),
        *((topics.gpu_group(MODEL), topics.lane(topics.tensors(MODEL), lane)) for lane in LANES),
    ]:
        try:
            print(f"  lag of {group} on {topic}: {group_lag(settings, group, topic)}", file=sys.stderr)
        except Exception as exc:  # a report of a stall must not stop at a broker that does not answer
            print(f"  lag of {group} on {topic}: unknown ({exc})", file=sys.stderr)
    for log in sorted(work.glob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-60:]
        print(f"--- the last lines of {log.name}:", *tail, sep="\n", file=sys.stderr, flush=True)


def start_broker(which: str, work: Path, kind: str) -> EmbeddedBroker | ApacheKafka:
    """The embedded Tansu, or a one-node Apache Kafka with its data on disk (tests/support/apache_kafka.py)."""
    if which == "kafka":
        from tests.support.apache_kafka import ApacheKafka  # only here: the GPU image's dry run has no Kafka

        return ApacheKafka.start(Path(tempfile.mkdtemp(dir=work, prefix=f"kafka-{kind}-")))
    return EmbeddedBroker.start(work / f"broker-{kind}.log")


@dataclass(frozen=True)
class Setup:
    """What a measurement runs on: the GPU worker's engine, the preprocess workers, the broker,
    the results cache (reuse: "on"; "no-reuse": the job submitted with --no-reuse; "off": the
    preprocess workers run with --no-results-cache) and whether the texts are made unique."""

    engine: str = "zero-cost"
    preprocess_workers: int = 1
    broker_kind: str = "tansu"
    reuse: str = "on"
    fresh: bool = False


def measure(kind: str, records: int, repository: Path, work: Path, setup: Setup) -> dict[str, float]:
    engine, preprocess_workers, broker_kind, reuse = (
        setup.engine,
        setup.preprocess_workers,
        setup.broker_kind,
        setup.reuse,
    )
    broker = start_broker(broker_kind, work, kind)
    env = {**os.environ, ENV_BOOTSTRAP: broker.bootstrap_servers, ENV_NAMESPACE: NAMESPACE}
    env[ENV_MODEL_REPOSITORY] = str(repository)
    workers: list[WorkerProcess] = []
    busy_path = work / f"busy-{kind}.txt"
    gpu_name = "GPU worker (engine free)" if engine == "zero-cost" else f"GPU worker ({engine} engine)"
    started = time.monotonic()

    def phase(what: str) -> None:  # where a run stopped by its time limit was, on stderr
        print(f"system cost, {kind}: {what} at {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)

    try:
        topics = Topics(NAMESPACE)  # every preprocess worker of the group gets partitions
        raw = TopicSpec(topics.raw_text, max(DEFAULT_PARTITIONS, preprocess_workers))
        ensure_topics(KafkaSettings(broker.bootstrap_servers), lanes(topics, raw))
        for n in range(preprocess_workers):
            workers.append(
                spawn_worker(
                    "preprocess",
                    ["preprocess", *(("--no-results-cache",) if reuse == "off" else ())],
                    bootstrap_servers=broker.bootstrap_servers,
                    namespace=NAMESPACE,
                    repository=repository,
                    log_path=work / f"pre-{n}.log",
                    extra_env=PREPROCESS_ENV,
                )
            )
        gpu = subprocess.Popen(
            [sys.executable, "-m", "bench.system_cost", "--gpu-worker", engine, str(busy_path)],
            env=env,
            stdout=(work / "gpu.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        workers.append(WorkerProcess("gpu", gpu, work / "gpu.log"))
        submit = [sys.executable, "-m", "jobs.cli", "submit", "--model", MODEL, "--wait"]
        warm = work / "warm.jsonl"
        warm.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts_of(kind, 50)), encoding="utf-8")
        phase("workers started")
        timed_command([*submit, str(warm), "--job-id", f"warm-{kind}", "--worker-grace-s", str(WARM_UP_GRACE_S)], env)
        phase("the 50-record warm-up job done")

        texts = fresh_texts(texts_of(kind, records)) if setup.fresh else texts_of(kind, records)
        source = work / f"{kind}.jsonl"
        source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        pre = "preprocess worker" if preprocess_workers == 1 else f"{preprocess_workers} preprocess workers"
        pids = {pre: workers[0].process.pid, gpu_name: gpu.pid, f"broker ({broker_kind})": broker.pid}
        pre_pids = [w.process.pid for w in workers[:preprocess_workers]]
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        cpu0[pre] = sum(cpu_seconds(pid) for pid in pre_pids)
        threads0 = {name: thread_cpu(pid) for name, pid in pids.items()}
        job = f"measured-{kind}"
        busy0 = busy_seconds(busy_path)
        done = threading.Event()
        submit_err, submit_pid = work / "submit.log", list[int]()

        def watch() -> None:
            limit = STALL_AFTER_S + records / STALL_RECORDS_PER_S
            while not done.wait(limit):
                stall_report(
                    workers, submit_pid[0] if submit_pid else None, KafkaSettings(broker.bootstrap_servers), work
                )

        threading.Thread(target=watch, name="stall-watch", daemon=True).start()
        try:
            measured = [*submit, str(source), "--job-id", job, *(("--no-reuse",) if reuse == "no-reuse" else ())]
            submitted = timed_command(measured, env, submit_err, submit_pid)
        finally:
            done.set()
        phase(f"the {records:,}-record job done")
        time.sleep(0.5 if engine != "zero-cost" else 0)  # the busy file's next write
        busy = busy_seconds(busy_path) - busy0
        cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        cpu[pre] = sum(cpu_seconds(pid) for pid in pre_pids) - cpu0[pre]
        threads = {name: top_threads(threads0[name], thread_cpu(pids[name]), records) for name in threads0}
        out = work / f"{kind}-results.jsonl"
        results = timed_command([sys.executable, "-m", "jobs.cli", "results", job, "-o", str(out)], env)
        lines = sum(1 for _ in out.open("rb"))
        if lines != records:
            raise RuntimeError(f"{out} has {lines} results of {records}")
        cpu["nearline submit --wait"] = submitted.cpu_s
        cpu["nearline results (JSON Lines)"] = results.cpu_s
    except BaseException:  # a time limit's SIGTERM too: what the workers said, before they go
        for log in sorted(work.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-15:]
            print(f"--- the last lines of {log.name}:", *tail, sep="\n", file=sys.stderr, flush=True)
        raise
    finally:
        stop_all(workers)
        broker.stop()
    limit = tokenizer_us(repository, texts)
    per_record = {name: seconds / records * 1e6 for name, seconds in cpu.items()}
    total = sum(per_record.values())
    average = np.mean([len(t) for t in texts])
    print(f"\n{records:,} {kind} texts ({average:.0f} characters on average), on {broker_kind}:")
    print(f"  {'stage':32} {'CPU us/record':>14} {'x tokenizer':>12}")
    for name, us in [*per_record.items(), ("all of it", total), ("the tokenizer alone (the limit)", limit)]:
        print(f"  {name:32} {us:14.0f} {us / limit:12.1f}")
    for name, line in threads.items():
        name = "the first preprocess worker" if name == pre and preprocess_workers > 1 else name
        print(f"  {name} by thread, us/record: {line}")
    print(f"  end to end: {records / submitted.wall_s:,.0f} records/s (submit --wait, {submitted.wall_s:.1f} s)")
    if engine != "zero-cost":
        print(f"  engine busy: {busy / submitted.wall_s:.0%} of the job's wall time ({busy:.1f} s of {engine})")
    return {"total_us": total, "tokenizer_us": limit, "records_per_s": records / submitted.wall_s}


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=30000)
    parser.add_argument("--texts", nargs="+", choices=["short", "paragraphs"], default=["short", "paragraphs"])
    parser.add_argument("--engine", choices=["zero-cost", "torch"], default="zero-cost")
    parser.add_argument("--preprocess-workers", type=int, default=1)
    parser.add_argument("--model-repository", type=Path, default=None)
    parser.add_argument(
        "--broker",
        nargs="+",
        choices=["tansu", "kafka"],
        default=["tansu"],
        help="the broker(s) to measure on, one after the other in this sitting (kafka: .ci/setup --tests fetches it)",
    )
    parser.add_argument(
        "--no-reuse",
        action="store_true",
        help="submit the measured job with --no-reuse: every record computed (the short texts repeat, and a "
        "repeated text is otherwise reused from the results cache), its key computed and its result cached",
    )
    parser.add_argument(
        "--no-results-cache",
        action="store_true",
        help="run the preprocess workers with --no-results-cache: every record computed, and no key, lookup, "
        "cache write or cache read (against --no-reuse, the cost of a miss)",
    )
    parser.add_argument(
        "--fresh-texts",
        action="store_true",
        help="make every measured text unique to the run, so that every lookup misses (with the cache on: the "
        "cost of a miss, lookup included; against the same with --no-results-cache, what a miss adds)",
    )
    parser.add_argument("--gpu-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    precompile(Path(__file__).resolve().parents[1])  # the commands and workers start as installed
    repository = args.model_repository or Path(os.environ.get(ENV_MODEL_REPOSITORY) or default_repository())
    if args.gpu_worker:
        gpu_worker_main(repository, args.gpu_worker[0], Path(args.gpu_worker[1]))
        return
    ensure_model(repository, MODEL, print)
    with tempfile.TemporaryDirectory(prefix="nearline-system-cost-") as tmp:
        for kind in args.texts:
            for broker in args.broker:
                reuse = "off" if args.no_results_cache else "no-reuse" if args.no_reuse else "on"
                setup = Setup(args.engine, max(1, args.preprocess_workers), broker, reuse, args.fresh_texts)
                measure(kind, args.records, repository, Path(tmp), setup)
    print(f"\nmachine: {machine()}")


if __name__ == "__main__":
    main()
