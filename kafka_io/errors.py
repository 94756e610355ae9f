"""Faults of the infrastructure, as opposed to faults of a record."""


class KafkaIOError(RuntimeError):
    """Base of the errors raised at the Kafka edge."""


class BrokerUnavailableError(KafkaIOError):
    """The cluster did not answer; the message names the bootstrap servers."""


class DeliveryError(KafkaIOError):
    """A produced record was not confirmed by the broker; its inputs must not be committed."""


class SecuritySettingsError(KafkaIOError):
    """NEARLINE_KAFKA_* security settings that a client cannot apply as given."""


class TopicConfigError(KafkaIOError):
    """An existing topic whose settings cannot carry what nearline sends it (e.g. a lower record limit)."""
