"""A submission's texts cut into packs, each one Kafka record of raw.text (schemas/packs.py)."""

from __future__ import annotations

from collections.abc import Iterator

from kafka_io.records import OutRecord, pack_record
from producers.inputs import InputRecord
from schemas.packs import PackSettings, raw_text_pack_bytes


class TextPacker:
    """Consecutive texts of one submission gathered into packs: a pack is closed before the text
    that would take it past limits.max_records records or limits.max_bytes bytes (as
    schemas.packs.pack_spans cuts), so at most one pack's texts are held at a time.

    A text's size is an upper bound on what it adds to the pack's Avro body (its id, text and
    attributes, each length a varint of at most 5 bytes, its 8-byte sequence number), and the
    budget is max_bytes less an upper bound on the envelope (header, job id, model, time, array
    framing): every pack's Kafka value is at most max_bytes, unless one text alone is larger,
    which is then a pack of its own."""

    def __init__(self, job_id: str, model: str, topic: str, submitted_at: int, limits: PackSettings) -> None:
        self._job_id, self._model, self._topic, self._submitted_at = job_id, model, topic, submitted_at
        self._limits = limits
        self._budget = limits.max_bytes - (_PACK_ENVELOPE + len(job_id.encode()) + len(model.encode()))
        self._ids: list[str] = []
        self._seqs: list[int] = []
        self._texts: list[str] = []
        self._attributes: list[dict[str, str]] = []
        self._held = 0

    def add(self, record: InputRecord, seq: int) -> Iterator[OutRecord]:
        size = _packed_bytes(record)
        if self._ids and (len(self._ids) >= self._limits.max_records or self._held + size > self._budget):
            yield from self.flush()
        self._ids.append(record.record_id)
        self._seqs.append(seq)
        self._texts.append(record.text)
        self._attributes.append(record.attributes)
        self._held += size

    def flush(self) -> Iterator[OutRecord]:
        if not self._ids:
            return
        value = raw_text_pack_bytes(
            self._job_id, self._model, self._submitted_at, self._ids, self._seqs, self._texts, self._attributes
        )
        yield pack_record(self._topic, value, self._job_id, self._ids[0], len(self._ids), self._submitted_at)
        self._ids, self._seqs, self._texts, self._attributes, self._held = [], [], [], [], 0


# Upper bounds, in bytes, of what a RawTextPack's envelope takes besides its job id and model (the
# single-object header 10, two string lengths 10, submitted_at 10, four arrays' block counts and
# ends 24, the seqs buffer's length 5), and of what each record adds besides its strings (three
# string lengths 15, seq 8, its attribute map's count and end 6); each attribute adds 10 more.
_PACK_ENVELOPE = 64
_PACK_RECORD = 32
_PACK_ATTRIBUTE = 10


def _packed_bytes(record: InputRecord) -> int:
    size = _PACK_RECORD + len(record.record_id.encode()) + len(record.text.encode())
    if record.attributes:
        size += sum(_PACK_ATTRIBUTE + len(k.encode()) + len(v.encode()) for k, v in record.attributes.items())
    return size
