"""read_result_bodies against read_result_body, result by result: every value it reads gets the
same body read_result_body gives it, and every value it leaves (None) is one read_result_body
reads alone. The reference for read_result_body itself is fastavro (test_inference_result_bytes)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from schemas import InferenceResult, Tensor, decode, encode
from schemas.errors import SerdeError
from schemas.inference_result_bulk import MAX_COMPARED, MIN_BATCH, read_result_bodies
from schemas.inference_result_bytes import read_result_body
from schemas.result_encoding import ResultEncoder, RowTensor, encoded_ids, encoded_maps


def worker_results(n: int, *, job: str = "job-1", version: str = "1", dim: int = 8, seed: int = 0) -> list[bytes]:
    """n results as the GPU worker writes them: one batch, one embedding output each."""
    rng = np.random.default_rng(seed)
    return ResultEncoder("minilm", version).encode_batch(
        ids=[encoded_ids(job, f"r{i}", i * 1000 + 3) for i in range(n)],
        outputs=[RowTensor("embedding", rng.standard_normal((n, dim), dtype=np.float32))],
        labels=None,
        batch_id=f"gpu-0:{seed}",
        lengths=list(range(1, n + 1)),
        padded_length=16,
        maps=[encoded_maps({}, {"submitted": 10 + i}) for i in range(n)],
        batch_timestamps={"batch_formed": 12, "result_produced": 13},
    )


def alone(value: bytes) -> object:
    """read_result_body's answer, or the kind of error it raises."""
    try:
        return read_result_body(value)
    except SerdeError as exc:
        return type(exc)


def check(values: list[bytes]) -> int:
    """Each value read in bulk is read as read_result_body reads it; how many were."""
    bodies = read_result_bodies(values)
    assert len(bodies) == len(values)
    read = 0
    for value, body in zip(values, bodies, strict=True):
        if body is not None:
            assert body == read_result_body(value)
            read += 1
        else:
            alone(value)  # left to be read alone: it must be readable, or raise a SerdeError
    return read


def test_reads_every_result_of_the_common_layout() -> None:
    values = worker_results(200)
    assert check(values) == 200


def test_leaves_whatever_differs_from_the_batch_layout_to_be_read_alone() -> None:
    values = worker_results(40)
    other_job = worker_results(3, job="job-2", seed=1)
    other_version = worker_results(3, version="2", seed=2)
    other_dim = worker_results(3, dim=4, seed=3)
    labelled = encode(
        InferenceResult(
            "job-1",
            "lab",
            1,
            "minilm",
            "1",
            (Tensor.from_array("top", np.zeros(2, np.float32)),),
            "b",
            1,
            labels=("cat",),
        )
    )
    attributed = encode(
        InferenceResult(
            "job-1",
            "att",
            2,
            "minilm",
            "1",
            (Tensor.from_array("embedding", np.zeros(8, np.float32)),),
            "b",
            1,
            {"lang": '"en"'},
        )
    )
    foreign = [b"", b"\x00", b"not avro at all", values[0][:12]]
    mixed = values[:20] + other_job + other_version + other_dim + [labelled, attributed] + foreign + values[20:]
    random.Random(5).shuffle(mixed)
    bodies = read_result_bodies(mixed)
    for value, body in zip(mixed, bodies, strict=True):
        if value in values:
            assert body == read_result_body(value)  # the common layout is read in bulk
        elif body is not None:
            assert body == read_result_body(value)


@pytest.mark.parametrize("seed", range(6))
def test_cut_or_damaged_values_are_never_read_otherwise(seed: int) -> None:
    """Values cut short at every length, and with bytes flipped: whatever is read in bulk is what
    read_result_body reads; the rest is left to it (which reads them or raises)."""
    rng = random.Random(seed)
    values = worker_results(64, seed=seed)
    damaged = []
    for value in values:
        kind = rng.randrange(3)
        if kind == 0:
            damaged.append(value[: rng.randrange(len(value))])
        elif kind == 1:
            at = rng.randrange(len(value))
            damaged.append(value[:at] + bytes([rng.randrange(256)]) + value[at + 1 :])
        else:
            damaged.append(value)
    check(damaged)
    assert check(damaged) >= sum(d == v for d, v in zip(damaged, values, strict=True)) - 1  # the first sets the layout


def test_large_sequence_numbers_and_long_ids() -> None:
    values = ResultEncoder("minilm", "1").encode_batch(
        ids=[encoded_ids("j" * 300, "ü" * (i * 7), s) for i, s in enumerate([0, -1, 2**62, -(2**63), 2**63 - 1] * 8)],
        outputs=[RowTensor("embedding", np.ones((40, 3), np.float32))],
        labels=None,
        batch_id="b" * 200,
        lengths=[2**40] * 40,
        padded_length=2**33,
        maps=[encoded_maps({}, {}) for _ in range(40)],
        batch_timestamps={},
    )
    assert check(values) == 40


def test_small_batches_are_left_to_the_reader_of_one() -> None:
    assert read_result_bodies(worker_results(MIN_BATCH - 1)) == [None] * (MIN_BATCH - 1)


def test_a_result_of_huge_fields_is_never_the_batchs_example() -> None:
    """Each field of the example is compared against every result as a records x bytes matrix: one
    result of a 500 KB model version first in a batch made that 8 GB. It is read alone instead,
    and the batch takes the next result's layout."""
    huge = worker_results(1, version="v" * (MAX_COMPARED + 1))
    values = huge + worker_results(100)
    bodies = read_result_bodies(values)
    assert bodies[0] is None  # left to read_result_body, which reads it
    assert read_result_body(values[0]) is not None
    assert all(body == read_result_body(v) for body, v in zip(bodies[1:], values[1:], strict=True))
    assert read_result_bodies(worker_results(40, version="v" * (MAX_COMPARED + 1))) == [None] * 40


V1_HEADER = b"\xc3\x01" + bytes.fromhex("61e0a3c7f5c8b2f9")  # schemas/avro/history/inference_result.v1.avsc


def as_v1(value: bytes) -> bytes:
    """A result as a worker of schema v1 wrote it: v1's fingerprint, no generation fields
    (tests/schemas/test_inference_result_bytes.py checks this against fastavro's v1 writer)."""
    return V1_HEADER + value[10:-4]


def test_results_written_under_v1_are_read_in_bulk_beside_current_ones() -> None:
    old = [as_v1(v) for v in worker_results(40, seed=1)]
    new = worker_results(40, seed=2)
    mixed = old + new
    random.Random(3).shuffle(mixed)
    bodies = read_result_bodies(mixed)
    assert all(body is not None for body in bodies)  # two passes, one per header
    assert check(mixed) == 80
    first = bodies[mixed.index(old[0])]
    assert first is not None and (first.head.record_id, first.head.seq, first.batch_id) == ("r0", 3, "gpu-0:1")


def test_a_generation_among_embeddings_is_left_to_the_whole_decode_with_its_text() -> None:
    values = worker_results(40)
    generation = InferenceResult(
        "job-1",
        "g",
        7,
        "minilm",
        "1",
        (Tensor.from_array("embedding", np.zeros(8, np.float32)),),
        "gpu-0:0",
        40,
        text="a completion",
        finish_reason="length",
        completion_tokens=16,
    )
    values.insert(5, encode(generation))
    bodies = read_result_bodies(values)
    assert bodies[5] is None and read_result_body(values[5]) is None
    assert decode(values[5], InferenceResult).text == "a completion"
    assert sum(body is not None for body in bodies) == 40
