"""The Kafka edge: the only package that imports confluent_kafka.

What belongs here: client settings and factories with house defaults, topic creation and
checks, produce-and-confirm, poll windows and commits, topic reads, transactions, the keyed
tables (jobs, schedules), the embedded Tansu broker, and the metrics every worker exports
(metrics.py: the /metrics endpoint, build info, records consumed and produced, consumer lag,
dead letters, and the helpers the stages' own metrics use). It speaks nearline's own types
(`records.ConsumedRecord`, `records.OutRecord`, `errors.*`); the client handles it makes
(`clients.Consumer`, `clients.Producer`) are opaque to the rest of the code.

What does not: anything that decodes a record's value or knows what a job is (jobs/, schemas/).
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
