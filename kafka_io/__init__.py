"""The Kafka edge: the only package that imports confluent_kafka.

Settings, client factories with house defaults, topic creation, produce-and-confirm, batch
polling, topic reading and the embedded Tansu broker.
"""

from confluent_kafka import Consumer, KafkaException, Message, Producer

from kafka_io.errors import BrokerUnavailableError, DeliveryError, KafkaIOError
from kafka_io.records import OutRecord, SourceRef
from kafka_io.settings import KafkaSettings, Topics

__all__ = [
    "BrokerUnavailableError",
    "Consumer",
    "DeliveryError",
    "KafkaException",
    "KafkaIOError",
    "KafkaSettings",
    "Message",
    "OutRecord",
    "Producer",
    "SourceRef",
    "Topics",
]
