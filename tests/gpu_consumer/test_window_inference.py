from __future__ import annotations

import numpy as np
import pytest

from gpu_consumer.batcher import BatchSettings
from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
from gpu_consumer.engines.protocol import Engine
from gpu_consumer.vocabulary import vocabulary_size
from gpu_consumer.window_inference import handle_window
from kafka_io.records import ConsumedRecord
from kafka_io.topology import Topics
from schemas import DeadLetter, InferenceResult, Tensor, TensorRecord, decode, encode
from schemas.packs import PackHead, tensor_pack_bytes
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
    policy = BatchSettings(16, max_padding_waste=None)  # one batch, padded to its longest record
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


@pytest.mark.parametrize(
    ("shape", "data", "said"),
    [
        # #12 item 3: 2**32 x 2**32 int64s wraps to 0 in int64 arithmetic, so 0 bytes of data "fit"
        ((2**32, 2**32), b"", "needs 147573952589676412928 bytes"),
        # the bytes fit (1 int64; 0 of 0), so the size check passed and numpy's reshape raised a
        # plain ValueError out of the worker's loop: at every redelivery of the record
        ((1,) * 70, bytes(8), "maximum supported dimension"),
        ((2**62, 0), b"", "array is too big"),
    ],
    ids=["a product that overflows int64", "70 dimensions", "a dimension numpy cannot index"],
)
def test_a_shape_no_array_can_take_is_a_dead_letter_not_a_crash(
    tiny: TinyModel, shape: tuple[int, ...], data: bytes, said: str
) -> None:
    odd = encode(TensorRecord("job-h", "r0", 0, "tiny", "1", (Tensor("input_ids", "int64", shape, data),), {}, {}))
    good = tensor_record(1, np.array([101, 7592, 102]))
    out = handle_window(
        [ConsumedRecord("t", 0, 0, odd), ConsumedRecord("t", 0, 1, good)],
        OnnxRuntimeEngine(tiny.config, threads=1),
        tiny.config,
        Topics(),
        "w-0",
    )
    (dead,) = [decode(value(o), DeadLetter) for o in out if o.topic == "dead.letters"]
    assert (dead.error_type, dead.source_offset, dead.record_id) == ("TensorFormatError", 0, "r0")
    assert said in dead.error
    assert [decode(value(o), InferenceResult).record_id for o in out if o.topic == "results"] == ["r1"]


# --- packs (#41): many records of one job in one Kafka record ---

STAMPS = {"submitted": 11, "preprocess_start": 12, "preprocess_end": 13}


def pack_of(first: int, arrays: list[np.ndarray], attributes: list[dict[str, str]] | None = None) -> bytes:
    n = len(arrays)
    return tensor_pack_bytes(
        PackHead("job-p", "tiny", "1", "input_ids", STAMPS),
        [f"r{first + i}" for i in range(n)],
        [first + i for i in range(n)],
        arrays,
        attributes or [{}] * n,
    )


def test_a_window_of_a_pack_and_a_single_record_gives_one_result_per_record(tiny: TinyModel) -> None:
    topics = Topics("ns")
    rng = np.random.default_rng(7)
    arrays = [rng.integers(1, 30000, size=n, dtype=np.int64) for n in (5, 2, 9, 3, 7)]
    attributes = [{}, {"lang": "fr"}, {}, {}, {"src": "a", "k": "v"}]
    single = np.array([101, 4000, 4001, 102])
    sources = [
        ConsumedRecord("ns.tensors.tiny", 0, 3, pack_of(0, arrays, attributes), headers=(("records", b"5"),)),
        ConsumedRecord("ns.tensors.tiny", 1, 8, tensor_record(9, single)),  # a foreign producer's record
    ]
    engine = OnnxRuntimeEngine(tiny.config, threads=1)
    out = handle_window(sources, engine, tiny.config, topics, "w-0", BatchSettings(16, max_padding_waste=None))

    assert all(o.topic == "ns.results" for o in out)
    results = {r.record_id: r for r in (decode(value(o), InferenceResult) for o in out)}
    assert sorted(results) == ["r0", "r1", "r2", "r3", "r4", "r9"]
    for i, ids in enumerate(arrays):
        r = results[f"r{i}"]
        assert (r.job_id, r.seq, r.length, r.attributes) == ("job-p", i, len(ids), attributes[i])
        np.testing.assert_allclose(r.arrays()["embedding"], tiny.expected(ids), rtol=1e-5, atol=1e-6)
        assert {k: r.timestamps[k] for k in STAMPS} == STAMPS
        assert {"batch_formed", "inference_start", "inference_end", "result_produced"} <= set(r.timestamps)
    np.testing.assert_allclose(results["r9"].arrays()["embedding"], tiny.expected(single), rtol=1e-5, atol=1e-6)
    assert (results["r9"].job_id, results["r9"].seq) == ("job-h", 9)
    headers = {o.key: o.headers for o in out}
    assert headers[b"job-p/r3"] == [("job_id", b"job-p"), ("submission", b"11")]
    assert headers[b"job-h/r9"] == [("job_id", b"job-h"), ("submission", b"1")]


def test_a_record_of_a_pack_with_no_tokens_or_too_many_is_dead_lettered_alone(tiny: TinyModel) -> None:
    topics = Topics("ns")
    too_long = np.full(tiny.config.max_length + 1, 7, dtype=np.int64)
    arrays = [np.array([101, 5, 102]), np.array([], dtype=np.int64), np.array([101, 6, 102]), too_long]
    arrays.append(np.array([101, 8, 102]))
    src = ConsumedRecord("ns.tensors.tiny", 2, 40, pack_of(10, arrays), headers=(("records", b"5"),))
    out = handle_window([src], OnnxRuntimeEngine(tiny.config, threads=1), tiny.config, topics, "w-0")

    results = {r.record_id: r for r in (decode(value(o), InferenceResult) for o in out if o.topic == "ns.results")}
    assert sorted(results) == ["r10", "r12", "r14"]
    for i in (0, 2, 4):
        np.testing.assert_allclose(results[f"r1{i}"].arrays()["embedding"], tiny.expected(arrays[i]), atol=1e-6)
    letters = [(o.key, decode(value(o), DeadLetter)) for o in out if o.topic == "ns.dead.letters"]
    assert [(key, d.record_id, d.source_index) for key, d in letters] == [
        (b"job-p/r11", "r11", 1),
        (b"job-p/r13", "r13", 3),
    ]
    for (_, letter), index in zip(letters, (1, 3), strict=True):
        assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("ns.tensors.tiny", 2, 40)
        assert letter.error_type == "TensorFormatError" and letter.job_id == "job-p"
        alone = decode(letter.payload, TensorRecord)  # what dlq replay sends back: a record of its own
        assert (alone.job_id, alone.record_id, alone.seq, alone.timestamps) == (
            "job-p",
            f"r1{index}",
            10 + index,
            STAMPS,
        )
        np.testing.assert_array_equal(alone.tensors[0].to_array(), arrays[index])
    assert "0 tokens" in letters[0][1].error and f"{tiny.config.max_length + 1} tokens" in letters[1][1].error


def test_a_record_of_a_pack_that_breaks_the_engine_is_dead_lettered_alone(
    tiny: TinyModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the ids left unchecked (gpu_consumer/vocabulary.py would refuse 99999 first): the engine breaks
    monkeypatch.setattr("gpu_consumer.window_inference.vocabulary_size", lambda config: None)
    arrays = [np.array([101, 2000 + i, 102]) for i in range(6)]
    arrays[4] = np.array([101, 99999, 102])  # outside the vocabulary: Gather fails on its whole batch
    src = ConsumedRecord("ns.tensors.tiny", 0, 5, pack_of(0, arrays), headers=(("records", b"6"),))
    engine = OnnxRuntimeEngine(tiny.config, threads=1)
    out = handle_window([src], engine, tiny.config, Topics("ns"), "w-0", BatchSettings(16, max_padding_waste=None))
    results = [decode(value(o), InferenceResult) for o in out if o.topic == "ns.results"]
    assert sorted(r.record_id for r in results) == ["r0", "r1", "r2", "r3", "r5"]
    (letter,) = [decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters"]
    assert (letter.record_id, letter.source_index, letter.source_offset) == ("r4", 4, 5)
    np.testing.assert_array_equal(decode(letter.payload, TensorRecord).tensors[0].to_array(), arrays[4])


def test_a_pack_for_another_model_dead_letters_each_record_alone(tiny: TinyModel) -> None:
    other = tensor_pack_bytes(
        PackHead("job-o", "other", "1", "input_ids", {}), ["a", "b"], [0, 1], [np.array([1, 2])] * 2, [{}] * 2
    )
    out = handle_window(
        [ConsumedRecord("t", 0, 0, other)], OnnxRuntimeEngine(tiny.config, threads=1), tiny.config, Topics(), "w"
    )
    letters = [decode(value(o), DeadLetter) for o in out]
    assert [(d.record_id, d.source_index) for d in letters] == [("a", 0), ("b", 1)]
    assert all("pack is for model 'other'" in d.error for d in letters)


def test_token_ids_outside_the_vocabulary_are_dead_letters_before_any_engine_runs(tiny: TinyModel) -> None:
    """On CUDA such an id is a device-side assert: the worker must exit, and each worker that polls
    the record again dies too. It is refused on the CPU instead: a pack's record alone, a single
    record alone, and the engine never sees them (this engine would have raised for the batch)."""
    size = vocabulary_size(tiny.config)
    assert size is not None and size > 200
    arrays = [np.array([101, 2000 + i, 102]) for i in range(5)]
    arrays[1] = np.array([101, size, 102])  # one past the last id
    pack = ConsumedRecord("ns.tensors.tiny", 0, 7, pack_of(0, arrays), headers=(("records", b"5"),))
    negative = ConsumedRecord("ns.tensors.tiny", 0, 8, tensor_record(9, np.array([101, -3, 102])))
    last = ConsumedRecord("ns.tensors.tiny", 0, 9, tensor_record(10, np.array([101, size - 1, 102])))

    rows: list[int] = []

    class Counting(OnnxRuntimeEngine):
        def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            rows.append(len(next(iter(inputs.values()))))
            return super().infer(inputs)

    engine = Counting(tiny.config, threads=1)
    out = handle_window([pack, negative, last], engine, tiny.config, Topics("ns"), "w-0")
    results = sorted(str(decode(value(o), InferenceResult).record_id) for o in out if o.topic == "ns.results")
    assert results == ["r0", "r10", "r2", "r3", "r4"]
    letters = {str(d.record_id): d for d in (decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters")}
    assert sorted(letters) == ["r1", "r9"]
    assert f"token id {size} is outside the model's vocabulary (0 to {size - 1})" in letters["r1"].error
    assert "token id -3 is outside" in letters["r9"].error and letters["r1"].source_index == 1
    assert sum(rows) == 5  # no batch failed and was bisected: the bad ids never reached it
