"""Benchmark: the reuse index's memory and lookup cost, and the cost of a record's reuse key.

    .venv/bin/python -m bench.reuse_index [--keys 1000000 10000000] [--lookups 200000]

For each --keys count, in a process of its own (so its RSS is the index's alone): builds the index
as a replay of the cache topic would (reuse/index.py's rebuild batches, random keys: BLAKE2b's
output is uniform), then prints the RSS it added, its peak, the table's bytes and bytes per key, the
replay's cost per record, and the cost per record of a lookup one key at a time (hits and misses)
and a pack of 128 at a time (lookup_many). Then, in this process: the reuse key of a 200-byte text
(RecordKeys.text) against BLAKE2b of the same bytes alone, and a model fingerprint over a 90 MB
weight file (MiniLM's size) cold and cached. Last, for each --store-keys count in a process of its
own, the results store (reuse/store.py) holding that many 1.5 KB results: the RSS it added against
its spool's size, and the cost per record of filling it (put_many, 1,000 at a time) and of a
lookup in packs of 128 (get_many, hits); and filled in the batches a cache tail applies as it
follows the topic (20, 120 and 1,000 records). Figures, never assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.decoupling import machine
from model_repository.config import ModelConfig, TensorSpec, TokenizerSpec
from reuse.fingerprint import FileDigests, ModelFingerprint, model_fingerprint
from reuse.index import REPLAY_BATCH, ReuseIndex
from reuse.keys import RecordKeys
from reuse.store import ResultStore

PACK = 128


def rss_kib(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def keys_of(prefixes: np.ndarray) -> list[bytes]:
    """32-byte keys with these prefixes (their first 8 bytes, little-endian)."""
    return [int(p).to_bytes(8, "little") + bytes(24) for p in prefixes]


def one_size(count: int, lookups: int) -> None:
    """Build an index of `count` keys and print its figures (run in a child process)."""
    rng = np.random.default_rng(count)
    before = rss_kib()
    start = time.perf_counter()
    index = ReuseIndex(expected=count)
    for first in range(0, count, REPLAY_BATCH):
        n = min(REPLAY_BATCH, count - first)
        prefixes = rng.integers(2, 2**64 - 1, size=n, dtype=np.uint64)
        index.insert_many(prefixes, (prefixes % 12).astype(np.int32), np.arange(first, first + n, dtype=np.int64))
    replay_us = (time.perf_counter() - start) / count * 1e6
    added_mib = (rss_kib() - before) / 1024
    peak_mib = (rss_kib("VmHWM") - before) / 1024
    hits = keys_of(rng.choice(index.prefixes[index.prefixes > 1], size=lookups, replace=False))
    misses = keys_of(rng.integers(2, 2**64 - 1, size=lookups, dtype=np.uint64))
    timings = {}
    for name, keys in (("hit", hits), ("miss", misses)):
        start = time.perf_counter()
        for key in keys:
            index.lookup(key)
        timings[name] = (time.perf_counter() - start) / len(keys) * 1e6
    packs = [np.frombuffer(b"".join(hits[i : i + PACK]), dtype="<u8")[::4].copy() for i in range(0, len(hits), PACK)]
    start = time.perf_counter()
    for pack in packs:
        index.lookup_many(pack)
    pack_us = (time.perf_counter() - start) / len(hits) * 1e6
    print(
        f"{count:>11,} keys  RSS +{added_mib:,.0f} MiB (peak +{peak_mib:,.0f})  table {index.nbytes / 2**20:,.0f} MiB "
        f"in {index.capacity:,} slots = {index.nbytes / count:.1f} B/key  replay {replay_us:.2f} us/record  "
        f"lookup {timings['hit']:.2f} us/hit {timings['miss']:.2f} us/miss  "
        f"in packs of {PACK} {pack_us:.2f} us/record",
        flush=True,
    )


def store_size(count: int, value_bytes: int = 1536) -> None:
    """Fill a results store with `count` results and print its figures (run in a child process)."""
    rng = np.random.default_rng(count)
    before = rss_kib()
    with tempfile.TemporaryDirectory() as folder, ResultStore(folder, expected=count) as store:
        value = rng.bytes(value_bytes)
        sample: list[bytes] = []
        start = time.perf_counter()
        for first in range(0, count, 1000):
            keys = [rng.bytes(32) for _ in range(min(1000, count - first))]
            store.put_many([(key, value) for key in keys])
            sample += keys[:: max(1, count // 100_000)][:10]
        fill_us = (time.perf_counter() - start) / count * 1e6
        added_mib = (rss_kib() - before) / 1024
        start = time.perf_counter()
        for i in range(0, len(sample), PACK):
            store.get_many(sample[i : i + PACK])
        get_us = (time.perf_counter() - start) / len(sample) * 1e6
        print(
            f"store {count:>11,} results of {value_bytes:,} B  RSS +{added_mib:,.0f} MiB "
            f"(index {store.index_bytes / 2**20:,.0f} MiB, spool {store.spool_bytes / 2**20:,.0f} MiB)  "
            f"fill {fill_us:.2f} us/record  lookup in packs of {PACK} {get_us:.2f} us/record (hits)",
            flush=True,
        )


def key_cost(records: int) -> None:
    rng = np.random.default_rng(0)
    texts = [rng.bytes(100).hex() for _ in range(records)]  # 200 characters each
    keys = RecordKeys(ModelFingerprint("minilm", "1", bytes(32)))
    import hashlib

    for name, step in (
        ("RecordKeys.text (str, 200 chars)", keys.text),
        ("blake2b-256 of the 200 bytes alone", lambda t: hashlib.blake2b(t.encode(), digest_size=32).digest()),
    ):
        start = time.perf_counter()
        for text in texts:
            step(text)
        print(f"{name:<38} {(time.perf_counter() - start) / records * 1e6:.2f} us/record", flush=True)


def fingerprint_cost() -> None:
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        config = ModelConfig(
            name="minilm",
            version="1",
            task="text-embedding",
            inputs=(TensorSpec("input_ids", "int64", ("batch", "sequence"), "token_ids"),),
            outputs=(TensorSpec("sentence_embedding", "float32", ("batch", 384)),),
            max_batch_size=64,
            postprocess=("l2_normalize",),
            tokenizer=TokenizerSpec("tokenizer.json", 256),
            directory=directory,
        )
        config.write()
        (directory / "model.onnx").write_bytes(os.urandom(90 << 20))
        (directory / "tokenizer.json").write_bytes(os.urandom(700 << 10))
        digests = FileDigests()
        start = time.perf_counter()
        model_fingerprint(config, digests=digests)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(100):
            model_fingerprint(config, digests=digests)
        warm = (time.perf_counter() - start) / 100
        print(f"model fingerprint, 90 MB weights + 0.7 MB tokenizer: {cold:.2f} s cold, {warm * 1e6:.0f} us cached")


def tail_cost(records: int = 200_000, value_bytes: int = 1_560) -> None:
    """The store fed as a cache tail that keeps up feeds it: put_many in the batches each of its
    fetches brings (a median of 120 records, 5 to 1,000, over a 100,000-record job on Kafka)."""
    rng = np.random.default_rng(0)
    value = rng.bytes(value_bytes)
    entries = [(rng.bytes(32), value) for _ in range(records)]
    for batch in (20, 120, 1000):
        with tempfile.TemporaryDirectory() as folder, ResultStore(folder) as store:
            start = time.process_time()
            for i in range(0, records, batch):
                store.put_many(entries[i : i + batch])
            cost = (time.process_time() - start) / records * 1e6
        print(f"store fed in batches of {batch:>5,} ({records:,} results of {value_bytes:,} B): {cost:.2f} us/record")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--lookups", type=int, default=200_000)
    parser.add_argument("--records", type=int, default=200_000, help="texts keyed for the key cost")
    parser.add_argument("--store-keys", type=int, nargs="*", default=[1_000_000], help="results in the store")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store-one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one_size(args.one, args.lookups)
        return
    if args.store_one:
        store_size(args.store_one)
        return
    print(machine())
    for count in args.keys:
        command = [sys.executable, "-m", "bench.reuse_index", "--one", str(count), "--lookups", str(args.lookups)]
        subprocess.run(command, check=True)
    key_cost(args.records)
    fingerprint_cost()
    tail_cost()
    for count in args.store_keys:
        subprocess.run([sys.executable, "-m", "bench.reuse_index", "--store-one", str(count)], check=True)


if __name__ == "__main__":
    main()
