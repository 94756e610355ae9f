"""The contract between stages: Avro schemas (avro/*.avsc), their records and the serde, and the
model repository's config (model_config.py).

What does not belong here: any I/O with Kafka (kafka_io/) or logic of a stage.
"""

from schemas.errors import (
    NotSingleObjectError,
    SerdeError,
    TensorFormatError,
    TruncatedRecordError,
    UnknownSchemaError,
    WrongRecordTypeError,
)
from schemas.records import (
    DeadLetter,
    InferenceResult,
    Job,
    RawImage,
    RawText,
    Schedule,
    ScheduleTick,
    Tensor,
    TensorRecord,
    now_us,
)
from schemas.serde import decode, encode

__all__ = [
    "DeadLetter",
    "InferenceResult",
    "Job",
    "NotSingleObjectError",
    "RawImage",
    "RawText",
    "Schedule",
    "ScheduleTick",
    "SerdeError",
    "Tensor",
    "TensorFormatError",
    "TensorRecord",
    "TruncatedRecordError",
    "UnknownSchemaError",
    "WrongRecordTypeError",
    "decode",
    "encode",
    "now_us",
]
