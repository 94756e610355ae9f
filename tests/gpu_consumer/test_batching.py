from __future__ import annotations

import numpy as np
import pytest

from gpu_consumer.batcher import check_record_input, pad_batch, warmup_batch
from gpu_consumer.postprocess import l2_normalize, mean_pooling
from schemas import TensorFormatError
from tests.tiny_model import TinyModel


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
        (np.array([1, 2], dtype=np.int32), "dtype int32"),
        (np.ones((2, 2), dtype=np.int64), "expected one unbatched sequence"),
        (np.array([], dtype=np.int64), "0 tokens"),
        (np.ones(65, dtype=np.int64), "65 tokens"),
    ],
)
def test_records_the_model_cannot_take_are_refused(tiny: TinyModel, ids: np.ndarray, message: str) -> None:
    with pytest.raises(TensorFormatError, match=message):
        check_record_input(tiny.config, ids)
