"""Follow a model's tensor topic and the results, printing one JSON line per record as it arrives.

    NEARLINE_BOOTSTRAP_SERVERS=... NEARLINE_NAMESPACE=... python -m tests.support.record_probe MODEL

Run in a host of bench.hosts (the test process has no address on the hosts' network) by the
network-fault trials (tests/support/multihost.py), which read from these lines which partition
each record came from, which worker produced its result and when: {"t": monotonic seconds,
"kind": "tensor", "key" (job/record: a pack's records a line each), "partition"} or {"t",
"kind": "result", "job", "id", "worker" (its PID), "started_us" (its inference start, epoch
microseconds)}. CLOCK_MONOTONIC is the machine's, the same in every namespace, so "t" compares
with the test's own time.monotonic().
"""

from __future__ import annotations

import json
import sys
import time

from kafka_io.errors import BrokerUnavailableError
from kafka_io.reading import TopicFollower
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from schemas import InferenceResult, decode
from tests.support.records import tensor_rows_of


def worker_pid(batch_id: str) -> int:
    """batch ids are `<host name>-<pid>-<window>.<batch>` (gpu_consumer/worker.py)."""
    return int(batch_id.rsplit("-", 2)[-2])


def follow(settings: KafkaSettings, topics: Topics, model: str) -> None:
    names = [topics.tensors(model), topics.results]
    while True:  # the GPU workers create the topics once they are warm
        try:
            follower = TopicFollower(settings, names)
        except BrokerUnavailableError:
            time.sleep(0.2)
            continue
        if {t for t, _ in follower.partitions} == set(names):
            break
        follower.close()
        time.sleep(0.2)
    print(json.dumps({"t": time.monotonic(), "kind": "ready"}), flush=True)
    with follower:
        while True:
            records = follower.poll(0.2)
            now = time.monotonic()
            for record in records:
                if record.topic == topics.results:
                    result = decode(record.value, InferenceResult)
                    line = {
                        "kind": "result",
                        "job": result.job_id,
                        "id": result.record_id,
                        "worker": worker_pid(result.batch_id),
                        "started_us": result.timestamps.get("inference_start", 0),
                    }
                    print(json.dumps({"t": now, **line}))
                else:  # a line per record: a pack's key names only its first (#41)
                    for row in tensor_rows_of(record):
                        line = {"kind": "tensor", "key": row.key, "partition": record.partition}
                        print(json.dumps({"t": now, **line}))
            sys.stdout.flush()


if __name__ == "__main__":
    follow(KafkaSettings.from_env(), Topics.from_env(), sys.argv[1])
