"""The worker process's edge: Kafka, the metrics endpoint, child processes, the host's CPUs.

The only package that imports confluent_kafka, and the one the stages (producers/,
preprocess_app/, gpu_consumer/) stand on for everything that touches the world outside their
own loop. Below it is only schemas/; nothing here imports a stage or jobs/.

What belongs here: client settings and factories with house defaults, topic creation and
checks, produce-and-confirm, poll windows and commits, topic reads and followers (the keyed
tables of jobs and schedules; cancellations.py, the per-submission cancels every worker follows
from the jobs topic), transactions, the embedded Tansu broker, the metrics every worker exports
(metrics.py and metrics_http.py: the /metrics endpoint, build info, records consumed and
produced, consumer lag, dead letters, and the helpers the stages' own metrics use), child
processes (children.py) and how many CPUs this process may use (cpus.py, which sizes the
workers' thread pools). It speaks nearline's own types (`records.ConsumedRecord`,
`records.OutRecord`, `errors.*`); the client handles it makes (`clients.Consumer`,
`clients.Producer`) are opaque to the rest of the code.

What does not: what a job is for or how it runs (jobs/), the record schemas themselves
(schemas/, which the followers here only decode with), preprocessing and inference.
"""

from kafka_io.errors import KAFKA_FAULTS, BrokerUnavailableError, DeliveryError, KafkaIOError
from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import KafkaSettings, Topics

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
