from __future__ import annotations

import numpy as np

from gpu_consumer.batcher import BatchPolicy
from gpu_consumer.engine import Engine, OnnxRuntimeEngine
from gpu_consumer.handler import handle_window
from kafka_io.records import ConsumedRecord
from kafka_io.settings import Topics
from schemas import DeadLetter, InferenceResult, Tensor, TensorRecord, decode, encode
from tests.support.records import value
from tests.support.tiny_model import TinyModel


def tensor_record(seq: int, ids: np.ndarray, model: str = "tiny") -> bytes:
    return encode(
        TensorRecord(
            "job-h",
            f"r{seq}",
            seq,
            model,
            "1",
            (Tensor.from_array("input_ids", ids),),
            {},
            {"submitted": 1, "preprocess_start": 2, "preprocess_end": 3},
        )
    )


def test_a_batch_gives_one_result_per_good_record_and_dead_letters_the_rest(tiny: TinyModel) -> None:
    topics = Topics("ns")
    good = [
        np.array([101, 7592, 2088, 102]),
        np.array([101, 2000, 3000, 4000, 5000, 6000, 102]),
        np.array([101, 102]),
    ]
    sources = [
        ConsumedRecord("ns.tensors.tiny", 0, 0, tensor_record(0, good[0])),
        ConsumedRecord("ns.tensors.tiny", 0, 1, tensor_record(1, np.array([1.5], dtype=np.float32))),
        ConsumedRecord("ns.tensors.tiny", 1, 0, tensor_record(2, good[1])),
        ConsumedRecord("ns.tensors.tiny", 1, 1, tensor_record(3, good[2], model="other")),
        ConsumedRecord("ns.tensors.tiny", 1, 2, tensor_record(4, good[2])),
        ConsumedRecord("ns.tensors.tiny", 1, 3, b"\xc3\x01" + b"\x00" * 8),
    ]
    engine = OnnxRuntimeEngine(tiny.config, threads=1)
    policy = BatchPolicy(16, max_padding_waste=None)  # one batch, padded to its longest record
    out = handle_window(sources, engine, tiny.config, topics, "w-0", policy)

    results = [decode(value(o), InferenceResult) for o in out if o.topic == "ns.results"]
    dead = [decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters"]
    by_id = {r.record_id: r for r in results}
    assert [r.record_id for r in results] == ["r4", "r0", "r2"]  # shortest first: sorted for padding
    for rid, ids in zip(["r0", "r2", "r4"], good, strict=True):
        result = by_id[rid]
        np.testing.assert_allclose(result.arrays()["embedding"], tiny.expected(ids), rtol=1e-5, atol=1e-6)
        assert result.batch_size == 3 and result.batch_id == "w-0.0"
        assert (result.length, result.padded_length) == (len(ids), 7)
        assert {"submitted", "batch_formed", "inference_start", "inference_end", "result_produced"} <= set(
            result.timestamps
        )
    # each result's submission header is its own stamp: what readers that count a job go by
    assert [o.headers for o in out if o.topic == "ns.results"] == [[("job_id", b"job-h"), ("submission", b"1")]] * 3
    assert [(d.source_partition, d.source_offset, d.error_type) for d in dead] == [
        (0, 1, "TensorFormatError"),
        (1, 1, "TensorFormatError"),
        (1, 3, "UnknownSchemaError"),
    ]
    assert "dtype float32, model tiny takes int64" in dead[0].error
    assert "record is for model 'other'" in dead[1].error
    assert all(d.stage == "inference" and d.model == "tiny" for d in dead)


def test_a_batch_of_only_poison_runs_no_inference(tiny: TinyModel) -> None:
    class Exploding(Engine):
        name = "exploding"
        max_batch_size = 16
        pad_to_bucket = False
        postprocessed: tuple[str, ...] = ()

        def warmup(self) -> None: ...

        def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            raise AssertionError("must not be called")

    out = handle_window([ConsumedRecord("t", 0, 0, b"junk")], Exploding(), tiny.config, Topics(), "w-1")
    assert [o.topic for o in out] == ["dead.letters"]


def test_token_ids_carried_narrow_give_the_results_of_the_graphs_own_dtype(tiny: TinyModel) -> None:
    ids = np.array([101, 7592, 2088, 102])
    engine = OnnxRuntimeEngine(tiny.config, threads=1)
    results = {}
    for dtype in ("int64", "int32", "uint16"):
        (out,) = handle_window(
            [ConsumedRecord("t", 0, 0, tensor_record(0, ids.astype(dtype)))], engine, tiny.config, Topics(), "w-0"
        )
        results[dtype] = decode(value(out), InferenceResult).arrays()["embedding"]
    np.testing.assert_allclose(results["int64"], tiny.expected(ids), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(results["uint16"], results["int64"])
    np.testing.assert_array_equal(results["int32"], results["int64"])
    # floats are not token ids, whatever their width
    (dead,) = handle_window(
        [ConsumedRecord("t", 0, 0, tensor_record(0, ids.astype("float32")))], engine, tiny.config, Topics(), "w-0"
    )
    assert decode(value(dead), DeadLetter).error_type == "TensorFormatError"


def test_a_shape_whose_product_overflows_int64_is_a_dead_letter_not_a_crash(tiny: TinyModel) -> None:
    """#12 item 3: 2**32 x 2**32 int64s wraps to 0 in int64 arithmetic, so 0 bytes of data "fit"."""
    huge = Tensor("input_ids", "int64", (2**32, 2**32), b"")
    oversized = encode(TensorRecord("job-h", "r0", 0, "tiny", "1", (huge,), {}, {}))
    good = tensor_record(1, np.array([101, 7592, 102]))
    out = handle_window(
        [ConsumedRecord("t", 0, 0, oversized), ConsumedRecord("t", 0, 1, good)],
        OnnxRuntimeEngine(tiny.config, threads=1),
        tiny.config,
        Topics(),
        "w-0",
    )
    (dead,) = [decode(value(o), DeadLetter) for o in out if o.topic == "dead.letters"]
    assert (dead.error_type, dead.source_offset, dead.record_id) == ("TensorFormatError", 0, "r0")
    assert "needs 147573952589676412928 bytes" in dead.error
    assert [decode(value(o), InferenceResult).record_id for o in out if o.topic == "results"] == ["r1"]
