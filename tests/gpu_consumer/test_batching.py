from __future__ import annotations

import numpy as np
import pytest

from gpu_consumer.batcher import (
    BatchPolicy,
    check_record_input,
    edge_batches,
    pad_batch,
    plan_batches,
    warmup_batch,
)
from gpu_consumer.postprocess import l2_normalize, mean_pooling
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
    plans = plan_batches(lengths, BatchPolicy(max_batch_size=2), buckets, pad_to_bucket=True)
    assert [[lengths[i] for i in p] for p in plans] == [[3, 4], [5, 16], [17, 30], [40, 60]]
    plans = plan_batches(lengths, BatchPolicy(max_batch_size=8), buckets, pad_to_bucket=True)
    assert [[lengths[i] for i in p] for p in plans] == [[3, 4, 5, 16], [17, 30], [40, 60]]
    # padded to the bucket, 2 rows of bucket 32 already fill a 64-token budget
    plans = plan_batches([20, 25, 30], BatchPolicy(8, 64), buckets, pad_to_bucket=True)
    assert [len(p) for p in plans] == [2, 1]


def test_dynamic_engines_get_sorted_batches_cut_where_padding_would_pass_the_bound() -> None:
    lengths = [100, 20, 21, 22, 50, 52, 23]
    plans = plan_batches(lengths, BatchPolicy(max_batch_size=8, max_padding_waste=0.10))
    # 20..23 pad 6.5% of their tokens; adding 50 would make it 66%
    assert [[lengths[i] for i in p] for p in plans] == [[20, 21, 22, 23], [50, 52], [100]]
    # the token budget counts rows x the longest record
    plans = plan_batches([30, 20, 25], BatchPolicy(8, max_batch_tokens=64, max_padding_waste=None))
    assert [[[30, 20, 25][i] for i in p] for p in plans] == [[20, 25], [30]]
    unbounded = plan_batches(lengths, BatchPolicy(max_batch_size=8, max_padding_waste=None))
    assert [len(p) for p in unbounded] == [7]


def test_images_are_chunked_in_arrival_order() -> None:
    assert plan_batches([0] * 5, BatchPolicy(max_batch_size=2)) == [[0, 1], [2, 3], [4]]


def test_default_length_buckets_are_powers_of_two_up_to_the_max_length(tiny: TinyModel) -> None:
    assert tiny.config.buckets == (16, 32, 64)


def test_the_cost_fit_recovers_call_row_and_token_costs_from_timings() -> None:
    from gpu_consumer.cost_model import PROBES, CostModel, fit

    truth = CostModel(per_call_s=5e-4, per_row_s=2e-5, per_token_s=3e-7)
    model = fit([(rows, width, truth.seconds(rows, width)) for rows, width in PROBES])
    for got, want in zip(
        (model.per_call_s, model.per_row_s, model.per_token_s),
        (truth.per_call_s, truth.per_row_s, truth.per_token_s),
        strict=True,
    ):
        assert abs(got - want) <= 1e-9


def test_a_burst_of_contention_at_start_up_spoils_no_probe_shape() -> None:
    from gpu_consumer.cost_model import PROBES, CostModel, measure

    truth = CostModel(per_call_s=5e-4, per_row_s=2e-5, per_token_s=3e-7)
    calls = [0]

    def timed(rows: int, width: int) -> float:
        calls[0] += 1
        # the first 4 calls run 10x slow, as while another process starts on the same cores
        return truth.seconds(rows, width) * (10 if calls[0] <= len(PROBES) else 1)

    model = measure(timed)
    assert calls[0] == 5 * len(PROBES)
    assert abs(model.per_call_s - truth.per_call_s) <= 1e-9
    assert abs(model.per_token_s - truth.per_token_s) <= 1e-12


def test_a_costly_call_fills_batches_and_costly_tokens_cut_at_length_jumps() -> None:
    from gpu_consumer.cost_model import CostModel

    lengths = [10, 11, 12, 13, 14, 15, 16, 17, 40, 41, 42, 43]
    gpu = BatchPolicy(max_batch_size=16, cost=CostModel(per_call_s=5e-4, per_token_s=1e-7))
    # padding 8 rows from 17 to 40 tokens costs 18 us, far less than a 500 us call: one batch
    assert [len(p) for p in plan_batches(lengths, gpu)] == [12]
    # the 10% padding-waste rule, without a cost model, cuts it in four: 10-12 (13 would pad
    # 4 rows to 52 tokens for 46 real, 11.5% waste), 13-16, 17, 40-43
    assert [len(p) for p in plan_batches(lengths, BatchPolicy(max_batch_size=16))] == [3, 4, 1, 4]
    cpu = BatchPolicy(max_batch_size=64, cost=CostModel(per_call_s=1e-4, per_token_s=2e-6))
    # one more token for 8 rows costs 16 us < 100 us; 23 more tokens for 8 rows, 368 us: cut there
    assert [sorted(lengths[i] for i in p) for p in plan_batches(lengths, cpu)] == [lengths[:8], lengths[8:]]
