"""The worker process's edge to Kafka.

The only package that imports confluent_kafka, and the one the stages (producers/,
preprocess_app/, gpu_consumer/) stand on for everything that touches the world outside their
own loop. Below it are only schemas/ and runtime/ (the process's runtime: the metrics endpoint,
child processes, CPUs, the heap); nothing here imports a stage or jobs/.

What belongs here: client settings and factories with house defaults, topic creation and
checks, produce-and-confirm, poll windows and commits, topic reads and followers (the keyed
tables of jobs and schedules; cancellations.py, the per-submission cancels every worker follows
from the jobs topic), transactions, the embedded Tansu broker, the metrics every worker exports
(metrics.py: build info, records consumed and produced, consumer lag, dead letters, and the
helpers the stages' own metrics use; served by runtime/metrics_http.py). It speaks nearline's own
types (`records.ConsumedRecord`, `records.OutRecord`, `errors.*`); the client handles it makes
(`clients.Consumer`, `clients.Producer`) are opaque to the rest of the code.

What does not: what a job is for or how it runs (jobs/), the record schemas themselves
(schemas/, which the followers here only decode with), preprocessing and inference.
"""

from kafka_io.errors import KAFKA_FAULTS, BrokerUnavailableError, DeliveryError, KafkaIOError
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics

__all__ = [
    "KAFKA_FAULTS",
    "BrokerUnavailableError",
    "ConsumedRecord",
    "DeliveryError",
    "KafkaIOError",
    "KafkaSettings",
    "OutRecord",
    "Topics",
]
