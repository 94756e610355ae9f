"""Model names are names, never paths; a model whose files are corrupt fails its records, not the worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_io.records import ConsumedRecord
from kafka_io.topology import Topics
from model_repository.config import InvalidModelNameError, ModelUnavailableError, check_model_name
from model_repository.folders import load_model_config
from preprocess_app.image import preprocess_images
from preprocess_app.models import Models
from preprocess_app.text import preprocess_texts
from schemas import DeadLetter, RawImage, RawText, decode, encode
from schemas.packs import read_tensor_pack
from tests.support.records import value
from tests.support.tiny_model import broken_repository

NOT_NAMES = ["minilm/.", "/etc", "..", "a..b", ".", "", "Tiny", "x/y", "-x", "a" * 101, "tiny\n", "tiny ", "../tiny"]


@pytest.mark.parametrize("name", ["minilm", "efficientnet-lite0", "tiny", "a.b_c-1", "0"])
def test_ordinary_model_names_are_accepted(name: str) -> None:
    assert check_model_name(name) == name


@pytest.mark.parametrize("name", NOT_NAMES)
def test_names_that_are_paths_or_could_resolve_elsewhere_are_refused(name: str) -> None:
    with pytest.raises(InvalidModelNameError, match="invalid model name"):
        check_model_name(name)


def test_a_name_that_is_a_path_never_loads_even_where_the_path_holds_a_model(tmp_path: Path) -> None:
    repository = broken_repository(tmp_path / "models")
    for name in ("tiny/.", str(repository / "tiny"), "../models/tiny"):
        with pytest.raises(InvalidModelNameError):
            load_model_config(repository, name)
    with pytest.raises(ModelUnavailableError, match=r"model unavailable: badcfg version 1: .*config.json"):
        load_model_config(repository, "badcfg")


def raw(seq: int, model: str, text: str = "hello world") -> bytes:
    return encode(RawText("job-m", f"r{seq}", seq, model, text, 1_000, {}))


def test_bad_names_and_unloadable_models_are_dead_letters_and_the_batch_goes_on(tmp_path: Path) -> None:
    repository = broken_repository(tmp_path / "models")
    topics = Topics("ns")
    models = ["tiny", "tiny/.", str(repository / "tiny"), "badtok", "badcfg", "tiny"]
    sources = [ConsumedRecord("ns.raw.text", 0, i, raw(i, m)) for i, m in enumerate(models)]
    lookup = Models(repository)
    for _ in range(2):  # the broken models fail again, without taking the worker or the batch down
        out = preprocess_texts(sources, lookup, topics)
        tensors = [read_tensor_pack(value(o)) for o in out if o.topic == "ns.tensors.tiny"]
        dead = {d.record_id: d for d in (decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters")}
        assert {o.topic for o in out} == {"ns.tensors.tiny", "ns.dead.letters"}
        assert [t.record_ids for t in tensors] == [["r0", "r5"]]  # one job submission: one pack
        assert {k: d.error_type for k, d in dead.items()} == {
            "r1": "InvalidModelNameError",
            "r2": "InvalidModelNameError",
            "r3": "ModelUnavailableError",
            "r4": "ModelUnavailableError",
        }
        assert "invalid model name 'tiny/.'" in dead["r1"].error
        assert dead["r3"].error.startswith("model unavailable: ")
        assert "badtok/1/tokenizer.json cannot be loaded as a tokenizer" in dead["r3"].error
        assert dead["r4"].error.startswith("model unavailable: badcfg version 1: ")


def test_an_image_record_naming_a_path_is_a_dead_letter_not_a_topic_name(tmp_path: Path) -> None:
    repository = broken_repository(tmp_path / "models")
    record = encode(RawImage("job-i", "i0", 0, "tiny/.", b"\x89PNG", "image/png", "a.png", 1, {}))
    (out,) = preprocess_images([ConsumedRecord("ns.raw.image", 0, 0, record)], Models(repository), Topics("ns"))
    assert out.topic == "ns.dead.letters"
    assert decode(value(out), DeadLetter).error_type == "InvalidModelNameError"
