"""The one record-size limit, and what a stage does with a record that would pass it.

Every topic nearline creates gets `max.message.bytes` = MAX_RECORD_BYTES explicitly (Kafka's own
default is about 1 MB, and Tansu enforces none: docs/brokers.md), and every producer's
`message.max.bytes` is the same, so a record either fits everywhere or is refused before it is
produced: by `nearline submit` for inputs, and as a dead letter by a worker for an output.
Dead letters themselves stay far below the limit: their copy of the payload is cut
(schemas.records.DEAD_LETTER_PAYLOAD_BYTES) and carries the original size and a SHA-256, so a dead
letter can never be the record the broker refuses.
"""

from __future__ import annotations

MAX_RECORD_BYTES = 16 * 1024 * 1024
# What a record holds besides its value (key, headers, batch framing), so a value this far under
# the limit always fits; inputs are checked against MAX_VALUE_BYTES.
RECORD_OVERHEAD_BYTES = 64 * 1024
MAX_VALUE_BYTES = MAX_RECORD_BYTES - RECORD_OVERHEAD_BYTES


class RecordTooLargeError(ValueError):
    """A record (an input, or a stage's output) larger than the record-size limit."""


def too_large(what: str, size: int) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"{what} is {size:,} bytes, over the {MAX_VALUE_BYTES:,}-byte record limit "
        f"(topics' max.message.bytes {MAX_RECORD_BYTES:,} less {RECORD_OVERHEAD_BYTES:,} for key and headers)"
    )
