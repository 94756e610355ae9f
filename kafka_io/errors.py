"""Faults of the infrastructure, as opposed to faults of a record."""

from confluent_kafka import KafkaError, KafkaException


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


class KafkaRefusedError(Exception):
    """Kafka answered and said no: a login it refused, a permission the principal lacks, a TLS
    handshake that failed. Not a KafkaIOError, so not one of KAFKA_FAULTS: an outage loop that
    retries those must not retry this, which no wait will mend; a worker exits with it."""


class KafkaAuthenticationError(KafkaRefusedError):
    """The broker refused the login: a wrong password, an unknown user, a SASL mechanism it does
    not offer."""


class KafkaAuthorizationError(KafkaRefusedError):
    """The principal lacks an ACL: the message names the principal, and the operation and
    resource where they are known."""


class KafkaTlsError(KafkaRefusedError):
    """The TLS handshake failed: a broker certificate no configured CA signed, a host name it
    does not hold, a client certificate the broker refused."""


# Kafka's codes for a denied operation, and the kind of resource each names.
AUTHORIZATION_CODES: dict[int, str] = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
}
AUTHENTICATION_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
        KafkaError.ILLEGAL_SASL_STATE,
    }
)
# librdkafka words a refused handshake or login so, under _SSL, _AUTHENTICATION or a transport
# error. Not the state a connection was in ("in state SSL_HANDSHAKE", "AUTH_REQ"): a broker that
# goes down mid-handshake closes it in that state too, and that is an outage.
TLS_WORDS = ("SSL handshake failed", "certificate verify failed", "SSL alert")
SASL_WORDS = ("SASL authentication error", "mechanism handshake failed", "Unsupported SASL mechanism")


def refused_error(
    err: KafkaError, principal: str, *, operation: str = "", resource: str = ""
) -> KafkaRefusedError | None:
    """The refusal `err` says, as our error naming `principal` (and the denied `operation` on
    `resource`, where the caller knows them); None when `err` is no refusal (an outage, a
    timeout, a record's fault)."""
    code, text = err.code(), err.str()
    if code in AUTHORIZATION_CODES:
        kind = AUTHORIZATION_CODES[code]
        where = f"{kind} {resource}" if resource else "the cluster" if kind == "cluster" else f"a {kind}"
        denied = f"may not {operation} {where}" if operation else f"was refused by {where}"
        return KafkaAuthorizationError(
            f"not authorized: {principal} {denied} (Kafka said {err.name()}); an operator grants it "
            "with kafka-acls.sh (docs/deploy.md lists what each worker kind needs)"
        )
    if code == KafkaError._SSL or (
        code in (KafkaError._TRANSPORT, KafkaError._AUTHENTICATION) and any(w in text for w in TLS_WORDS)
    ):
        return KafkaTlsError(f"TLS handshake with Kafka failed for {principal}: {text}")
    if code in AUTHENTICATION_CODES or (code == KafkaError._TRANSPORT and any(w in text for w in SASL_WORDS)):
        return KafkaAuthenticationError(f"Kafka refused the login of {principal}: {text}")
    return None


# What a caller outside kafka_io catches to mean "Kafka failed": our own errors, and the client's
# own exception, which any client call (a commit, a metadata query, a fatal consumer event) raises.
KAFKA_FAULTS: tuple[type[Exception], ...] = (KafkaIOError, KafkaException)
