"""Faults of the infrastructure, as opposed to faults of a record."""

from confluent_kafka import KafkaException


class KafkaIOError(RuntimeError):
    """Base of the errors raised at the Kafka edge."""


class BrokerUnavailableError(KafkaIOError):
    """The cluster did not answer; the message names the bootstrap servers."""


class DeliveryError(KafkaIOError):
    """A produced record was not confirmed by the broker; its inputs must not be committed.
    `confirmed`: how many records of the same call the broker did confirm."""

    def __init__(self, message: str, confirmed: int = 0) -> None:
        super().__init__(message)
        self.confirmed = confirmed


class SecuritySettingsError(KafkaIOError):
    """NEARLINE_KAFKA_* security settings that a client cannot apply as given."""


class GroupProtocolError(KafkaIOError):
    """A consumer group protocol the brokers do not offer (--group-protocol consumer before Kafka 4)."""


class TopicConfigError(KafkaIOError):
    """An existing topic whose settings cannot carry what nearline sends it (e.g. a lower record limit)."""


# What a caller outside kafka_io catches to mean "Kafka failed": our own errors, and the client's
# own exception, which any client call (a commit, a metadata query, a fatal consumer event) raises.
KAFKA_FAULTS: tuple[type[Exception], ...] = (KafkaIOError, KafkaException)


class MetricsPortError(OSError):
    """The --metrics-port cannot be bound (taken, or privileged), or its TLS files cannot be
    loaded: a usage error, not a Kafka one, kept here so the CLI maps it without importing the
    metrics."""
