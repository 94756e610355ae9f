"""Benchmark: peak memory of `nearline submit` of a Parquet file, for two sizes of it.

    .venv/bin/python -m bench.table_memory [--rows 100000 1000000] [--row-group 100000]

Writes a Parquet file of short texts (a sentence of ~60 characters, a different one per row) for
each --rows, starts the embedded broker and runs `nearline submit FILE --model minilm` in a
subprocess of its own against it, then prints its wall time and its own peak RSS (wait4's rusage
of that child). Reading is a record batch at a time, so the peak should not grow with the rows;
the broker (another process) holds every record. Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.decoupling import exit_on_sigterm, machine
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import ENV_BOOTSTRAP
from kafka_io.topology import ENV_NAMESPACE

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliett",
    "kilo",
    "lima",
    "mike",
    "november",
]


def write_texts(path: Path, rows: int, row_group: int) -> None:
    """rows short texts, written a row group at a time (the writer never holds the file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("text", pa.string()), ("n", pa.int64())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, row_group):
            numbers = range(start, min(rows, start + row_group))
            texts = [f"row {i}: {' '.join(WORDS[(i + k) % len(WORDS)] for k in range(8))}" for i in numbers]
            writer.write_table(pa.table({"text": texts, "n": list(numbers)}, schema=schema))


def measure(argv: list[str], env: dict[str, str], rows: int) -> None:
    with tempfile.TemporaryFile("w+") as log:
        started = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "jobs.cli", *argv], env=env, stdout=log, stderr=log, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        log.seek(0)
        last = log.read().strip().splitlines()[-1:]
    peak_mib = usage.ru_maxrss / 1024  # KiB on Linux
    print(f"submit of {rows:,} rows: exit {os.waitstatus_to_exitcode(status)}, {last}")
    print(f"  wall {seconds:.1f} s ({rows / seconds:,.0f} rows/s), peak RSS {peak_mib:,.0f} MiB")


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--row-group", type=int, default=100_000)
    parser.add_argument("--keep", default="n", help="--keep-columns for the submit ('' for none)")
    args = parser.parse_args()
    print(f"machine: {machine()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="nearline-table-bench-") as tmp:
        broker = EmbeddedBroker.start(Path(tmp) / "broker.log")
        try:
            env = {**os.environ, ENV_BOOTSTRAP: broker.bootstrap_servers, ENV_NAMESPACE: "bench"}
            for rows in args.rows:
                path = Path(tmp) / f"texts-{rows}.parquet"
                write_texts(path, rows, args.row_group)
                print(f"wrote {rows:,} rows, {path.stat().st_size / 2**20:,.1f} MiB")
                keep = ["--keep-columns", args.keep] if args.keep else []
                measure(["submit", str(path), "--model", "minilm", *keep], env, rows)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
