"""The contract between stages: Avro schemas (avro/*.avsc), their records and the serde.

What belongs here: the schemas themselves (avro/: raw_text, raw_image -> tensor_record ->
inference_result, dead_letter; job, schedule, schedule_tick, notification for the control plane's tables;
history/ keeps every earlier version a reader must still decode), their Python records
(records.py), encode and decode (serde.py; result_encoding.py: the GPU worker's fast path for
results), the errors a bad record is dead-lettered with (errors.py), input attributes
(attributes.py), a job's terms (terms.py: a Job's and a Schedule's). It imports nothing else of
nearline's: every other package stands on it (a model version's config is model_repository/'s).

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
    JobTerms,
    Notification,
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
    "JobTerms",
    "NotSingleObjectError",
    "Notification",
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
