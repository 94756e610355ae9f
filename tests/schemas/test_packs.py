"""Packs (schemas/packs.py): the bytes any Avro reader of the shipped schemas reads, columns that
agree, a record alone as the single record a reader of the topic takes, and cuts by count and bytes."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fastavro import parse_schema, schemaless_reader

from schemas import RawText, SerdeError, Tensor, TensorRecord, decode, encode
from schemas.packs import (
    MIN_RECORD_BYTES,
    PackHead,
    PackSettings,
    kind_of,
    pack_spans,
    raw_text_pack_bytes,
    read_raw_text_pack,
    read_tensor_pack,
    records_held,
    tensor_pack_bytes,
    unpacked,
)

AVRO = Path(__file__).resolve().parents[2] / "schemas" / "avro"


def plain_read(name: str, data: bytes) -> dict:
    """fastavro alone on the shipped .avsc, past the 10-byte single-object header."""
    schema = parse_schema(json.loads((AVRO / name).read_text()))
    read = schemaless_reader(io.BytesIO(data[10:]), schema)
    assert isinstance(read, dict)
    return read


def test_a_raw_text_pack_reads_back_and_as_any_avro_reader_reads_it() -> None:
    data = raw_text_pack_bytes(
        "job-1",
        "minilm",
        1_764_822_600_123_456,
        ["a", "b", "c"],
        [0, 1, 7],
        ["one", "zwei ü", "\u2028"],
        [{}, {"k": '"v"'}, {}],
    )
    assert kind_of(data) == "RawTextPack"
    pack = read_raw_text_pack(data)
    assert (pack.job_id, pack.model, pack.submitted_at, len(pack)) == ("job-1", "minilm", 1_764_822_600_123_456, 3)
    assert pack.record_ids == ["a", "b", "c"] and pack.texts == ["one", "zwei ü", "\u2028"]
    assert pack.seqs.tolist() == [0, 1, 7]
    plain = plain_read("raw_text_pack.avsc", data)
    assert plain["texts"] == ["one", "zwei ü", "\u2028"] and plain["attributes"] == [{}, {"k": '"v"'}, {}]
    assert np.frombuffer(plain["seqs"], "<i8").tolist() == [0, 1, 7]
    # record 1 alone is a RawText as any producer writes it
    assert decode(pack.single(1), RawText) == RawText(
        "job-1", "b", 1, "minilm", "zwei ü", 1_764_822_600_123_456, {"k": '"v"'}
    )
    # every record so, in order, for the readers that take a topic record by record
    singles = [decode(single, RawText) for single in unpacked(data)]
    assert [(t.record_id, t.seq, t.text) for t in singles] == [("a", 0, "one"), ("b", 1, "zwei ü"), ("c", 7, "\u2028")]
    assert unpacked(pack.single(2)) == [pack.single(2)]  # a single record stands for itself


def test_a_tensor_pack_gives_each_record_its_own_ids_as_views() -> None:
    arrays = [
        np.array([101, 7, 102], np.uint16),
        np.array([101, 102], np.uint16),
        np.array([101, 5, 6, 7, 102], np.uint16),
    ]
    stamps = {"submitted": 1, "preprocess_start": 2, "preprocess_end": 3}
    data = tensor_pack_bytes(
        PackHead("job-2", "minilm", "3", "input_ids", stamps), ["x", "y", "z"], [4, 5, 6], arrays, [{}, {}, {"n": "5"}]
    )
    assert kind_of(data) == "TensorPack"
    pack = read_tensor_pack(data)
    assert pack.lengths().tolist() == [3, 2, 5]
    for i, want in enumerate(arrays):
        assert pack.array(i).tolist() == want.tolist() and pack.array(i).dtype == np.dtype("<u2")
    plain = plain_read("tensor_pack.avsc", data)
    assert plain["dtype"] == "uint16" and np.frombuffer(plain["offsets"], "<i8").tolist() == [0, 3, 5, 10]
    single = decode(pack.single(2), TensorRecord)
    assert (single.job_id, single.record_id, single.seq, single.model_version) == ("job-2", "z", 6, "3")
    assert single.arrays()["input_ids"].tolist() == [101, 5, 6, 7, 102]
    assert single.attributes == {"n": "5"} and single.timestamps == stamps


def test_big_endian_ids_travel_little_endian() -> None:
    arrays = [np.array([1, 258], dtype=">i4")]
    pack = read_tensor_pack(tensor_pack_bytes(PackHead("j", "m", "1", "ids", {}), ["r"], [0], arrays, [{}]))
    assert pack.dtype == "int32" and pack.array(0).tolist() == [1, 258]


def test_single_records_are_not_packs() -> None:
    from schemas import encode

    assert kind_of(encode(RawText("j", "r", 0, "m", "t", 1))) is None
    assert kind_of(b"not avro") is None


@pytest.mark.parametrize(
    "cut",
    [
        lambda d: d[:-3],  # truncated
        lambda d: d + b"\x00",  # trailing bytes
        lambda d: d[:10] + b"\xff" * 4,  # garbage body
    ],
)
def test_a_malformed_pack_raises_a_serde_error(cut: Callable[[bytes], bytes]) -> None:
    data = raw_text_pack_bytes("j", "m", 1, ["a"], [0], ["t"], [{}])
    with pytest.raises(SerdeError):
        read_raw_text_pack(cut(data))
    tdata = tensor_pack_bytes(PackHead("j", "m", "1", "ids", {}), ["a"], [0], [np.array([1, 2], np.int64)], [{}])
    with pytest.raises(SerdeError):
        read_tensor_pack(cut(tdata))


def test_offsets_that_do_not_cut_the_data_are_refused() -> None:
    from fastavro import schemaless_writer

    from schemas.packs import TENSOR_PACK, _schema

    header, parsed = _schema(TENSOR_PACK)
    out = io.BytesIO()
    out.write(header)
    fields = {
        "job_id": "j",
        "model": "m",
        "model_version": "1",
        "record_ids": ["a", "b"],
        "seqs": np.array([0, 1], "<i8").tobytes(),
        "tensor": "ids",
        "dtype": "int64",
        "offsets": np.array([0, 3, 2], "<i8").tobytes(),  # goes backwards, and past the end
        "data": np.arange(2, dtype="<i8").tobytes(),
        "attributes": [{}, {}],
        "timestamps": {},
    }
    schemaless_writer(out, parsed, fields)
    with pytest.raises(SerdeError, match="offsets"):
        read_tensor_pack(out.getvalue())
    fields["record_ids"] = ["a"]  # columns of two lengths
    out = io.BytesIO()
    out.write(header)
    schemaless_writer(out, parsed, fields)
    with pytest.raises(SerdeError, match="1 record ids but 2 attribute maps"):
        read_tensor_pack(out.getvalue())


def test_packs_are_cut_by_count_and_by_bytes() -> None:
    assert pack_spans([1] * 5, PackSettings(max_records=2)) == [(0, 2), (2, 4), (4, 5)]
    assert pack_spans([4, 4, 4, 100, 1], PackSettings(max_bytes=10)) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert pack_spans([], PackSettings()) == []
    with pytest.raises(ValueError):
        PackSettings(max_records=0)


def test_a_records_header_is_capped_at_what_the_packs_bytes_can_hold() -> None:
    data = raw_text_pack_bytes("j", "m", 1, ["a", "b", "c"], [0, 1, 2], ["x", "y", "z"], [{}, {}, {}])
    assert records_held(3, data) == 3  # a true header stands
    assert records_held(9999999999999999999, data) == len(data) // MIN_RECORD_BYTES
    assert records_held(1, data) == records_held(0, data) == 1
    assert records_held(5, b"") == 1  # a tombstone holds at most itself


def test_a_raw_text_pack_with_a_text_that_is_not_utf8_reads_with_that_record_undecodable() -> None:
    texts = ["one", "QZ", "three"]
    data = raw_text_pack_bytes("j", "m", 7, ["a", "b", "c"], [0, 1, 2], texts, [{"k": "1"}, {"k": "2"}, {}])
    assert data.count(b"QZ") == 1
    data = data.replace(b"QZ", b"\xff\xfe")
    pack = read_raw_text_pack(data)
    assert (pack.record_ids, pack.seqs.tolist(), pack.texts[0::2]) == (["a", "b", "c"], [0, 1, 2], ["one", "three"])
    assert list(pack.undecodable) == [1]
    assert "text is not UTF-8" in pack.undecodable[1][0]
    # the record alone is the single RawText with its bytes as they came; the others as usual
    alone = encode(RawText("j", "b", 1, "m", "QZ", 7, {"k": "2"}))
    assert pack.single(1) == alone.replace(b"QZ", b"\xff\xfe")
    assert decode(pack.single(2), RawText) == RawText("j", "c", 2, "m", "three", 7, {})
    assert unpacked(data)[1] == pack.single(1)


def test_a_tensor_pack_whose_record_id_is_not_utf8_reads_with_that_record_undecodable() -> None:
    head = PackHead("j", "m", "1", "input_ids", {"submitted": 1})
    arrays = [np.array([1, 2]), np.array([3])]
    data = tensor_pack_bytes(head, ["a", "QZ"], [0, 1], arrays, [{"k": "v"}, {}])
    pack = read_tensor_pack(data.replace(b"QZ", b"\xff\xfe"))
    assert (pack.record_ids, list(pack.undecodable)) == (["a", "\ufffd\ufffd"], [1])
    assert pack.array(1).tolist() == [3] and pack.attributes == [{"k": "v"}, {}]
    tensors = (Tensor.from_array("input_ids", arrays[1]),)
    want = encode(TensorRecord("j", "QZ", 1, "m", "1", tensors, {}, dict(head.timestamps)))
    assert pack.single(1) == want.replace(b"QZ", b"\xff\xfe")
    assert decode(pack.single(0), TensorRecord).record_id == "a"
