"""The reuse key and the model fingerprint: what enters them and what does not."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from model_repository.config import ImageSpec, ModelConfig, TensorSpec, TokenizerSpec
from model_repository.folders import write_labels
from reuse.fingerprint import DIGESTS_FILE, FileDigests, ModelFingerprint, model_fingerprint, record_digests
from reuse.keys import CacheKeys, RecordKeys
from schemas.generation_request import (
    GenerationRequestDoc,
    RequestDefaults,
    chat_request,
    parse_request,
    prompt_request,
)
from schemas.records import RawImage, RawText
from tests.support.cache_keys import ONNX_CPU, cache_key


def embedder(directory: Path) -> ModelConfig:
    """A text embedder's version folder: its config, a stand-in graph and tokenizer."""
    config = ModelConfig(
        name="bge",
        version="1",
        task="text-embedding",
        inputs=(TensorSpec("input_ids", "int64", ("batch", "sequence"), "token_ids"),),
        outputs=(TensorSpec("last_hidden_state", "float32", ("batch", "sequence", 384)),),
        max_batch_size=64,
        postprocess=("mean_pooling", "l2_normalize"),
        tokenizer=TokenizerSpec("tokenizer.json", 256),
        directory=directory,
    )
    config.write()
    (directory / "model.onnx").write_bytes(bytes(range(256)) * 4096)
    (directory / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    return config


def classifier(directory: Path) -> ModelConfig:
    config = ModelConfig(
        name="vit",
        version="1",
        task="image-classification",
        inputs=(TensorSpec("pixel_values", "uint8", ("batch", 3, 224, 224), "pixels"),),
        outputs=(TensorSpec("logits", "float32", ("batch", 3)),),
        max_batch_size=32,
        postprocess=("softmax",),
        image=ImageSpec(),
        labels_file="labels.json",
        directory=directory,
    )
    config.write()
    (directory / "model.onnx").write_bytes(b"graph")
    write_labels(directory / "labels.json", ["cat", "dog", "fox"])
    return config


def digest_of(config: ModelConfig) -> bytes:
    return model_fingerprint(config, digests=FileDigests()).digest


def test_the_same_text_under_the_same_model_has_one_key(tmp_path: Path) -> None:
    config = embedder(tmp_path)
    a, b = RecordKeys(model_fingerprint(config)), RecordKeys(model_fingerprint(config, digests=FileDigests()))
    assert a.text("a naïve café") == b.text("a naïve café") == a.text("a naïve café".encode())
    assert len(a.text("a naïve café")) == 32


def test_each_part_of_the_key_changes_it(tmp_path: Path) -> None:
    model = ModelFingerprint("bge", "1", bytes(32))
    base = RecordKeys(model).text("text")
    others = [
        RecordKeys(model).text("text!"),
        RecordKeys(model).text("Text"),
        RecordKeys(model).image(b"text"),  # the same bytes as another kind of record
        RecordKeys(dataclasses.replace(model, name="bge2")).text("text"),
        RecordKeys(dataclasses.replace(model, version="2")).text("text"),
        RecordKeys(dataclasses.replace(model, digest=bytes(31) + b"\x01")).text("text"),
    ]
    assert len({base, *others}) == 1 + len(others)


def test_fields_are_length_prefixed_so_they_never_run_into_each_other() -> None:
    digest = bytes(32)
    assert RecordKeys(ModelFingerprint("a", "bc", digest)).text("x") != RecordKeys(
        ModelFingerprint("ab", "c", digest)
    ).text("x")


def test_record_ids_jobs_and_attributes_never_enter_the_key(tmp_path: Path) -> None:
    keys = RecordKeys(model_fingerprint(embedder(tmp_path)))
    one = RawText("job-a", "row-1", 0, "bge", "a ticket", 1, {"team": "search"})
    two = RawText("job-b", "row-9", 7, "bge", "a ticket", 2, {"team": "ads", "stars": "5"})
    assert keys.text(one.text) == keys.text(two.text)
    cat = RawImage("job-a", "cat.jpg", 0, "vit", b"\xff\xd8jpeg", "image/jpeg", "/a/cat.jpg", 1)
    renamed = RawImage("job-b", "kitty.jpg", 3, "vit", b"\xff\xd8jpeg", "image/png", "/b/kitty.jpg", 2)
    assert keys.image(cat.image) == keys.image(renamed.image)


def test_a_one_byte_change_in_a_weight_file_changes_the_fingerprint(tmp_path: Path) -> None:
    config = embedder(tmp_path)
    digests = FileDigests()
    before = model_fingerprint(config, digests=digests)
    assert model_fingerprint(config, digests=digests) == before
    weights = bytearray((tmp_path / "model.onnx").read_bytes())
    weights[len(weights) // 2] ^= 1
    (tmp_path / "model.onnx").write_bytes(bytes(weights))
    after = model_fingerprint(config, digests=digests)
    assert after.digest != before.digest
    assert after.digest == digest_of(config)  # what a fresh process computes: the cache saw the rewrite


def test_each_file_is_read_once_however_often_the_fingerprint_is_asked(tmp_path: Path) -> None:
    config = embedder(tmp_path)
    digests = FileDigests()
    for _ in range(3):
        model_fingerprint(config, digests=digests)
    assert digests.files_read == 2  # model.onnx and tokenizer.json; config.json is read as fields


def test_recorded_digests_are_read_in_place_of_the_files_while_the_files_keep_their_size_and_time(
    tmp_path: Path,
) -> None:
    config = embedder(tmp_path)
    computed = digest_of(config)
    record_digests(tmp_path)
    digests = FileDigests()
    assert model_fingerprint(config, digests=digests).digest == computed
    assert digests.files_read == 0  # neither the weights nor the tokenizer read
    weights = tmp_path / "model.onnx"
    weights.write_bytes(weights.read_bytes() + b"\0")  # rewritten: another size, another time
    changed = model_fingerprint(config, digests=digests)
    assert digests.files_read == 1 and changed.digest != computed
    (tmp_path / DIGESTS_FILE).write_text("not json")
    assert model_fingerprint(config, digests=FileDigests()).digest == changed.digest  # read again, all of it


def test_the_tokenizer_and_the_settings_that_change_outputs_change_the_fingerprint(tmp_path: Path) -> None:
    config = embedder(tmp_path / "text")
    base = digest_of(config)
    changed = [
        dataclasses.replace(config, postprocess=("cls_pooling", "l2_normalize")),  # pooling
        dataclasses.replace(config, postprocess=("mean_pooling",)),  # no normalising
        dataclasses.replace(config, tokenizer=TokenizerSpec("tokenizer.json", 128)),  # truncation
        dataclasses.replace(config, length_buckets=(64, 256)),
    ]
    assert all(digest_of(c) != base for c in changed)
    assert digest_of(dataclasses.replace(config, max_batch_size=8, source="/elsewhere")) == base
    (tmp_path / "text" / "tokenizer.json").write_text('{"model": {"vocab": {"b": 0}}}')
    assert digest_of(config) != base


def test_image_preprocessing_and_labels_change_the_fingerprint(tmp_path: Path) -> None:
    config = classifier(tmp_path)
    base = digest_of(config)
    assert config.image is not None
    for change in ({"resize": 224}, {"crop": 192}, {"resize_mode": "exact"}, {"jpeg_draft": False}):
        assert digest_of(dataclasses.replace(config, image=dataclasses.replace(config.image, **change))) != base
    assert digest_of(dataclasses.replace(config, top_k=2)) != base
    write_labels(tmp_path / "labels.json", ["cat", "dog", "wolf"])
    assert digest_of(config) != base


def test_a_new_version_of_the_same_files_is_another_key(tmp_path: Path) -> None:
    one = embedder(tmp_path / "bge" / "1")
    two = embedder(tmp_path / "bge" / "2")
    two = dataclasses.replace(two, version="2")
    assert RecordKeys(model_fingerprint(one)).text("x") != RecordKeys(model_fingerprint(two)).text("x")


def test_a_result_is_cached_under_its_reuse_key_joined_to_the_engine_that_computed_it() -> None:
    key = bytes(range(32))
    for runtime in (ONNX_CPU, "torch/cuda/fp16"):
        assert CacheKeys(runtime)(key) == cache_key(key, runtime)
    assert CacheKeys("torch/cuda/fp16")(key) != CacheKeys("torch/cuda/fp32")(key)
    assert CacheKeys("torch/cuda/fp16")(key) != CacheKeys("torch/cuda/fp16")(bytes(32))


def test_hidden_entries_of_the_folder_do_not_enter_the_fingerprint(tmp_path: Path) -> None:
    config = embedder(tmp_path)
    base = digest_of(config)
    (tmp_path / ".import-under-way").mkdir()
    (tmp_path / ".import-under-way" / "model.onnx").write_bytes(b"half written")
    assert digest_of(config) == base


def test_weights_in_a_linked_folder_enter_the_fingerprint_and_a_link_loop_ends(tmp_path: Path) -> None:
    config = embedder(tmp_path / "version")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "version" / "model").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere" / "up").symlink_to(tmp_path / "version")  # a loop back to the version
    base = digest_of(config)
    (tmp_path / "elsewhere" / "model.safetensors").write_bytes(b"weightz")
    assert digest_of(config) != base


LM = ModelFingerprint("smollm2", "1", bytes(32), default_max_tokens=256)


def test_a_sampled_request_without_a_seed_has_no_key() -> None:
    keys = RecordKeys(LM)
    assert keys.generation(prompt_request("Once", {"temperature": 0.7})) is None
    assert keys.generation(parse_request('{"prompt": "Once", "params": {"temperature": 1, "seed": null}}')) is None
    assert keys.generation(RequestDefaults(temperature=0.5).applied("Once", False)) is None
    seeded = keys.generation(prompt_request("Once", {"temperature": 0.7, "seed": 3}))
    assert seeded is not None
    assert seeded == keys.generation(prompt_request("Once", {"temperature": 0.7, "seed": 3}))
    assert seeded != keys.generation(prompt_request("Once", {"temperature": 0.7, "seed": 4}))


def test_a_greedy_request_has_one_key_whatever_its_seed_and_however_its_defaults_are_spelled() -> None:
    keys = RecordKeys(LM)
    greedy = keys.generation(prompt_request("Once"))
    assert greedy is not None
    assert greedy == keys.generation(prompt_request("Once", {"seed": 99}))
    assert greedy == keys.generation(prompt_request("Once", {"temperature": 0, "max_tokens": 256}))
    assert greedy == keys.generation(RequestDefaults(max_tokens=256).applied("Once", False))
    stops = keys.generation(prompt_request("Once", {"stop": "ab"}))
    assert stops == keys.generation(prompt_request("Once", {"stop": ["ab"]}))
    assert stops == keys.generation(GenerationRequestDoc("Once", (), {"stop": "ab"}))  # as given, unchecked
    assert stops != keys.generation(prompt_request("Once", {"stop": ["a", "b"]}))
    assert greedy != keys.generation(prompt_request("Once", {"max_tokens": 64}))
    shorter = RecordKeys(dataclasses.replace(LM, default_max_tokens=64))
    assert shorter.generation(prompt_request("Once")) == shorter.generation(prompt_request("Once", {"max_tokens": 64}))


def test_every_part_of_a_generation_request_changes_its_key() -> None:
    keys = RecordKeys(LM)
    chat = [{"role": "user", "content": "Once"}]
    requests = [
        prompt_request("Once"),
        prompt_request("Twice"),
        chat_request(chat),  # the same words as a chat: the template makes other tokens
        chat_request([{"role": "system", "content": "Be brief."}, *chat]),
        chat_request([{"role": "assistant", "content": "Once"}]),
        prompt_request("Once", {"max_tokens": 8}),
        prompt_request("Once", {"top_p": 0.5}),
        prompt_request("Once", {"top_k": 5}),
        prompt_request("Once", {"stop": "."}),
        prompt_request("Once", {"temperature": 0.7, "seed": 1}),
        prompt_request("Once", {"temperature": 0.8, "seed": 1}),
    ]
    found = [keys.generation(r) for r in requests]
    assert None not in found and len(set(found)) == len(requests)


def test_a_text_with_a_lone_surrogate_has_a_key_of_its_own() -> None:
    keys = RecordKeys(LM)
    found = {keys.text("a\ud800b"), keys.text("a\udcffb"), keys.text("ab"), keys.text("a\ufffdb")}
    assert len(found) == 4
    request = parse_request('{"prompt": "a\\ud800b"}')
    assert keys.generation(request) not in (None, keys.generation(prompt_request("a\ufffdb")))


@pytest.mark.parametrize("size", [0, 1, 200, 1 << 16])
def test_text_keys_are_32_bytes_for_any_length(size: int) -> None:
    assert len(RecordKeys(LM).text(os.urandom(size))) == 32
