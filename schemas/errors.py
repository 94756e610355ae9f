"""Typed decode errors. Stages turn each into a dead letter; none of them may crash a worker."""


class SerdeError(ValueError):
    """A payload that cannot be decoded into the record its topic carries."""


class NotSingleObjectError(SerdeError):
    """The bytes do not start with the Avro single-object marker C3 01."""


class UnknownSchemaError(SerdeError):
    """The writer-schema fingerprint is not among the schemas shipped in schemas/avro."""


class WrongRecordTypeError(SerdeError):
    """The payload is a valid record, but of another type than the reader expects."""


class TruncatedRecordError(SerdeError):
    """The Avro body ends early or is malformed."""


class TensorFormatError(SerdeError):
    """A tensor whose dtype, shape and byte length disagree, or that a model cannot take."""


class NotUtf8Error(SerdeError):
    """A record of a pack whose id, text or attributes are not UTF-8, as Avro strings must be."""
