from __future__ import annotations

import json
import struct
from importlib import resources

import numpy as np
import pytest

from schemas import (
    DeadLetter,
    InferenceResult,
    NotSingleObjectError,
    RawText,
    SerdeError,
    Tensor,
    TensorFormatError,
    TensorRecord,
    TruncatedRecordError,
    UnknownSchemaError,
    WrongRecordTypeError,
    decode,
    encode,
)
from schemas.serde import SchemaRegistry, decode_with


def crc64_avro(data: bytes) -> int:
    """The Rabin fingerprint exactly as the Avro specification writes it."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp & 0xFFFFFFFFFFFFFFFF)
    fp = empty
    for b in data:
        fp = (fp >> 8) ^ table[(fp ^ b) & 0xFF]
    return fp


def raw_text(**overrides: object) -> RawText:
    fields: dict[str, object] = {
        "job_id": "job-1",
        "record_id": "r1",
        "seq": 7,
        "model": "minilm",
        "text": "héllo wörld",
        "submitted_at": 1_700_000_000_000_000,
        "attributes": {"lang": "en"},
    }
    fields.update(overrides)
    return RawText(**fields)  # type: ignore[arg-type]


def tensor_record() -> TensorRecord:
    ids = np.array([101, 7592, 2088, 102], dtype=np.int64)
    return TensorRecord(
        "job-1",
        "r1",
        7,
        "minilm",
        "1",
        (Tensor.from_array("input_ids", ids),),
        {"k": "v"},
        {"submitted": 1, "preprocess_end": 2},
    )


def test_every_record_type_round_trips() -> None:
    result = InferenceResult(
        "job-1",
        "r1",
        7,
        "minilm",
        "1",
        (Tensor.from_array("embedding", np.arange(4, dtype=np.float32)),),
        "w-0",
        16,
        {},
        {"inference_end": 5},
    )
    letter = DeadLetter("preprocess", "ValueError", "bad", "raw.text", 2, 99, b"\x00\x01", 123, "job-1", None)
    for record in (raw_text(), tensor_record(), result, letter):
        assert decode(encode(record), type(record)) == record


def test_frame_is_single_object_encoding_with_the_spec_fingerprint() -> None:
    data = encode(raw_text())
    schema = json.loads((resources.files("schemas") / "avro" / "raw_text.avsc").read_text())
    from fastavro import parse_schema
    from fastavro.schema import to_parsing_canonical_form

    canonical = to_parsing_canonical_form(parse_schema(schema, named_schemas={}))
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == struct.pack("<Q", crc64_avro(canonical.encode()))


def test_spec_fingerprint_of_int() -> None:
    # Independent check of the algorithm used above against a value from the Avro test suite.
    assert crc64_avro(b'"int"') == 0x7275D51A3F395C8F


def test_tensor_bytes_decode_without_copy_and_little_endian() -> None:
    data = encode(tensor_record())
    decoded = decode(data, TensorRecord)
    ids = decoded.arrays()["input_ids"]
    assert ids.tolist() == [101, 7592, 2088, 102]
    assert ids.dtype == np.dtype("<i8")
    assert not ids.flags.writeable  # a view on the record's bytes, not a copy
    owner: object = ids
    while isinstance(owner, np.ndarray):
        owner = owner.base
    assert owner is decoded.tensors[0].data
    big_endian = np.array([1, 2], dtype=">i4")
    t = Tensor.from_array("x", big_endian)
    assert t.data == struct.pack("<ii", 1, 2)


def test_unknown_fingerprint_is_a_typed_error() -> None:
    data = bytearray(encode(raw_text()))
    data[2:10] = b"\x01" * 8
    with pytest.raises(UnknownSchemaError, match="0101010101010101"):
        decode(bytes(data), RawText)


def test_every_truncation_is_a_typed_error_never_a_crash() -> None:
    data = encode(tensor_record())
    for n in range(len(data)):
        with pytest.raises(SerdeError):
            decode(data[:n], TensorRecord)
    with pytest.raises(TruncatedRecordError, match="after the end"):
        decode(data + b"\x00", TensorRecord)


def test_not_avro_and_wrong_record_type() -> None:
    with pytest.raises(NotSingleObjectError):
        decode(b'{"text": "json is not avro"}', RawText)
    with pytest.raises(NotSingleObjectError):
        decode(b"", RawText)
    with pytest.raises(WrongRecordTypeError, match=r"expected a nearline\.TensorRecord"):
        decode(encode(raw_text()), TensorRecord)


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (Tensor("x", "int64", (3,), b"\x00" * 16), "needs 24 bytes"),
        (Tensor("x", "object", (1,), b"\x00" * 8), "unsupported dtype"),
        (Tensor("x", "float32", (2, -1), b""), "negative dimension"),
    ],
)
def test_tensor_whose_bytes_disagree_with_dtype_or_shape(tensor: Tensor, message: str) -> None:
    record = TensorRecord("j", "r", 0, "m", "1", (tensor,))
    decoded = decode(encode(record), TensorRecord)  # the frame is fine; the tensor is not
    with pytest.raises(TensorFormatError, match=message):
        decoded.arrays()


def test_old_writer_schema_resolves_to_the_current_reader() -> None:
    current = json.loads((resources.files("schemas") / "avro" / "raw_text.avsc").read_text())
    old = {**current, "fields": [f for f in current["fields"] if f["name"] != "attributes"]}
    registry = SchemaRegistry([current], [old])
    old_schema = SchemaRegistry([old], []).current("nearline.RawText")
    from io import BytesIO

    from fastavro import schemaless_writer

    body = BytesIO()
    fields = raw_text().to_avro()
    del fields["attributes"]
    schemaless_writer(body, old_schema.parsed, fields)
    data = b"\xc3\x01" + old_schema.fingerprint + body.getvalue()
    decoded = decode_with(registry, data, RawText)
    assert decoded.attributes == {}  # the field's default
    assert decoded.text == "héllo wörld"


def test_a_job_written_before_lanes_decodes_as_bulk() -> None:
    """A job.v4 row (no priority) in an existing registry still decodes: its lane is bulk (the
    current schema's default)."""
    from io import BytesIO

    from fastavro import schemaless_writer

    from schemas import Job

    old = json.loads((resources.files("schemas") / "avro" / "history" / "job.v4.avsc").read_text())
    old_schema = SchemaRegistry([old], []).current("nearline.Job")
    fields = Job("j", "m", "in.txt", "text", 3, 1, priority="live").to_avro()
    del fields["priority"]
    body = BytesIO()
    schemaless_writer(body, old_schema.parsed, fields)
    decoded = decode(b"\xc3\x01" + old_schema.fingerprint + body.getvalue(), Job)
    assert decoded.priority == "bulk" and decoded.total == 3
    assert decode(encode(Job("j", "m", "in.txt", "text", 3, 1, priority="live")), Job).priority == "live"


def test_a_job_written_before_its_window_and_reuse_were_kept_decodes_with_its_terms() -> None:
    """A job.v6 row (labels, deadline and webhook, no complete_within_s or reuse) decodes into the
    one terms record, its window unknown and reuse on (the current schema's defaults); a job
    written now keeps all four."""
    from io import BytesIO

    from fastavro import schemaless_writer

    from schemas import Job, JobTerms

    old = json.loads((resources.files("schemas") / "avro" / "history" / "job.v6.avsc").read_text())
    old_schema = SchemaRegistry([old], []).current("nearline.Job")
    terms = JobTerms({"team": "search"}, 60.0, "https://example.com/hook", reuse=False)
    job = Job("j", "m", "in.txt", "text", 3, 1, terms=terms, deadline_at=60_000_001)
    fields = job.to_avro()
    assert (fields["labels"], fields["notify"], fields["complete_within_s"], fields["reuse"]) == (
        {"team": "search"},
        "https://example.com/hook",
        60.0,
        False,
    )
    del fields["complete_within_s"], fields["reuse"]
    body = BytesIO()
    schemaless_writer(body, old_schema.parsed, fields)
    decoded = decode(b"\xc3\x01" + old_schema.fingerprint + body.getvalue(), Job)
    assert decoded.terms == JobTerms({"team": "search"}, None, "https://example.com/hook", reuse=True)
    assert decoded.deadline_at == 60_000_001
    assert decode(encode(job), Job) == job
