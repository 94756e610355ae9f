from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpu_consumer.batcher import (
    BatchSettings,
    check_record_input,
    edge_batches,
    pad_batch,
    plan_batches,
    warmup_batch,
)
from gpu_consumer.postprocess import l2_normalize, mean_pooling
from model_repository.config import ModelConfig, ModelUnavailableError
from model_repository.folders import load_model_config
from schemas import TensorFormatError
from tests.support.tiny_model import TinyModel


def test_pads_to_the_longest_in_the_batch_and_derives_mask_and_segments(tiny: TinyModel) -> None:
    batch = pad_batch(tiny.config, [np.array([101, 5, 102]), np.array([101, 102]), np.array([101, 7, 8, 9, 102])])
    assert batch.inputs["input_ids"].tolist() == [
        [101, 5, 102, 0, 0],
        [101, 102, 0, 0, 0],
        [101, 7, 8, 9, 102],
    ]
    assert batch.inputs["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert batch.inputs["token_type_ids"].sum() == 0
    assert all(a.dtype == np.int64 for a in batch.inputs.values())
    assert batch.lengths.tolist() == [3, 2, 5]
    assert batch.padded_tokens == 15


def test_warmup_batch_is_the_largest_shape(tiny: TinyModel) -> None:
    batch = warmup_batch(tiny.config)
    assert batch.inputs["input_ids"].shape == (tiny.config.max_batch_size, tiny.config.max_length)


def test_edge_batches_take_each_dimension_to_its_largest_once(tiny: TinyModel) -> None:
    shapes = [b.inputs["input_ids"].shape for b in edge_batches(tiny.config)]
    assert (tiny.config.max_batch_size, 8) in shapes and (1, tiny.config.max_length) in shapes
    rows, width = warmup_batch(tiny.config).inputs["input_ids"].shape
    assert sum(r * w for r, w in shapes) < rows * width / 4  # the point: a fraction of the largest batch


def test_mean_pooling_ignores_padding() -> None:
    hidden = np.array([[[1.0, 1.0], [3.0, 5.0], [100.0, 100.0]]], dtype=np.float32)
    batch = pad_batch_of_lengths([2])
    np.testing.assert_allclose(mean_pooling(hidden, batch), [[2.0, 3.0]])
    np.testing.assert_allclose(l2_normalize(np.array([[3.0, 4.0]]), batch), [[0.6, 0.8]])


def pad_batch_of_lengths(lengths: list[int]):  # type: ignore[no-untyped-def]
    from gpu_consumer.batcher import PaddedBatch

    return PaddedBatch({}, np.array(lengths))


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (np.array([1, 2], dtype=np.float32), "dtype float32"),
        (np.array([1, 2], dtype=np.uint64), "dtype uint64"),
        (np.ones((2, 2), dtype=np.int64), "expected one unbatched sequence"),
        (np.array([], dtype=np.int64), "0 tokens"),
        (np.ones(65, dtype=np.int64), "65 tokens"),
    ],
)
def test_records_the_model_cannot_take_are_refused(tiny: TinyModel, ids: np.ndarray, message: str) -> None:
    with pytest.raises(TensorFormatError, match=message):
        check_record_input(tiny.config, ids)


def test_static_shape_engines_get_batches_within_one_bucket_cut_at_size_and_token_budget() -> None:
    lengths = [40, 3, 17, 5, 30, 16, 60, 4]
    buckets = (16, 32, 64)
    plans = plan_batches(lengths, BatchSettings(max_batch_size=2), buckets, pad_to_bucket=True)
    assert [[lengths[i] for i in p] for p in plans] == [[3, 4], [5, 16], [17, 30], [40, 60]]
    plans = plan_batches(lengths, BatchSettings(max_batch_size=8), buckets, pad_to_bucket=True)
    assert [[lengths[i] for i in p] for p in plans] == [[3, 4, 5, 16], [17, 30], [40, 60]]
    # padded to the bucket, 2 rows of bucket 32 already fill a 64-token budget
    plans = plan_batches([20, 25, 30], BatchSettings(8, 64), buckets, pad_to_bucket=True)
    assert [len(p) for p in plans] == [2, 1]


def test_dynamic_engines_get_sorted_batches_cut_where_padding_would_pass_the_bound() -> None:
    lengths = [100, 20, 21, 22, 50, 52, 23]
    plans = plan_batches(lengths, BatchSettings(max_batch_size=8, max_padding_waste=0.10))
    # 20..23 pad 6.5% of their tokens; adding 50 would make it 66%
    assert [[lengths[i] for i in p] for p in plans] == [[20, 21, 22, 23], [50, 52], [100]]
    # the token budget counts rows x the longest record
    plans = plan_batches([30, 20, 25], BatchSettings(8, max_batch_tokens=64, max_padding_waste=None))
    assert [[[30, 20, 25][i] for i in p] for p in plans] == [[20, 25], [30]]
    unbounded = plan_batches(lengths, BatchSettings(max_batch_size=8, max_padding_waste=None))
    assert [len(p) for p in unbounded] == [7]


def test_images_are_chunked_in_arrival_order() -> None:
    assert plan_batches([0] * 5, BatchSettings(max_batch_size=2)) == [[0, 1], [2, 3], [4]]


def test_default_length_buckets_are_powers_of_two_up_to_the_max_length(tiny: TinyModel) -> None:
    assert tiny.config.buckets == (16, 32, 64)


@pytest.mark.parametrize(
    ("buckets", "refusal"),
    [
        ([24, 64], None),
        ([8, 16, 100], None),  # past max_length (64): the last bucket holds every record anyway
        ([16, 32], "end below the tokenizer's max_length 64"),
        ([64, 16], "must be increasing"),
        ([16, 16, 64], "must be increasing"),
        ([0, 64], "at least 1"),
    ],
)
def test_explicit_length_buckets_give_every_record_a_bucket_or_the_model_is_refused(
    tiny: TinyModel, tmp_path: Path, buckets: list[int], refusal: str | None
) -> None:
    folder = tmp_path / "tiny" / "1"
    folder.mkdir(parents=True)
    d = json.loads(tiny.config.to_json())
    (folder / "config.json").write_text(json.dumps({**d, "length_buckets": buckets}), encoding="utf-8")
    if refusal is None:
        assert load_model_config(tmp_path, "tiny").buckets == tuple(buckets)
        return
    with pytest.raises(ModelUnavailableError, match=refusal):
        load_model_config(tmp_path, "tiny")


def test_length_buckets_on_an_image_model_are_refused(efficientnet: ModelConfig, tmp_path: Path) -> None:
    folder = tmp_path / "efficientnet-lite0" / "1"
    folder.mkdir(parents=True)
    d = json.loads(efficientnet.to_json())
    (folder / "config.json").write_text(json.dumps({**d, "length_buckets": [224]}), encoding="utf-8")
    with pytest.raises(ModelUnavailableError, match="for text models"):
        load_model_config(tmp_path, "efficientnet-lite0")
