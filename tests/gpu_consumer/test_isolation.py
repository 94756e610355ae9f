from __future__ import annotations

import time

import numpy as np
import pytest

from gpu_consumer.batcher import BatchSettings, pad_batch
from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
from gpu_consumer.engines.protocol import Engine
from gpu_consumer.isolation import EngineFault, bisect
from gpu_consumer.window_inference import handle_window
from kafka_io.records import ConsumedRecord
from kafka_io.topology import Topics
from schemas import DeadLetter, InferenceResult, Tensor, TensorRecord, decode, encode
from tests.support.records import value
from tests.support.tiny_model import TinyModel


def test_bisection_pins_failures_to_single_rows() -> None:
    poison = {3, 6}
    calls: list[list[int]] = []

    def run(rows: list[int]) -> int:
        calls.append(rows)
        if poison & set(rows):
            raise ValueError(f"bad rows {sorted(poison & set(rows))}")
        return len(rows)

    good, bad = bisect(run, list(range(8)))
    assert sorted(i for rows, _ in good for i in rows) == [0, 1, 2, 4, 5, 7]
    assert [i for i, _ in bad] == [3, 6]
    assert len(calls) < 16  # halves, not one call per record


def test_faults_are_not_bisected() -> None:
    def run(rows: list[int]) -> int:
        raise MemoryError("CUDA out of memory")

    with pytest.raises(MemoryError):
        bisect(run, list(range(8)))


def record(seq: int, ids: list[int]) -> ConsumedRecord:
    tensor = Tensor.from_array("input_ids", np.array(ids, dtype=np.int64))
    value = encode(TensorRecord("job-x", f"r{seq}", seq, "tiny", "1", (tensor,), {}, {"submitted": 1}))
    return ConsumedRecord("ns.tensors.tiny", seq % 2, 100 + seq, value)


@pytest.fixture
def unchecked_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Token ids left unchecked before the engine (gpu_consumer/vocabulary.py refuses one outside
    the vocabulary first), so that ONNX Runtime's Gather itself fails on 99999: a record that
    breaks the engine, as any input the checks cannot foresee may."""
    monkeypatch.setattr("gpu_consumer.window_inference.vocabulary_size", lambda config: None)


@pytest.mark.usefixtures("unchecked_ids")
def test_a_record_that_breaks_the_engine_is_dead_lettered_and_its_batch_still_completes(tiny: TinyModel) -> None:
    # token id 99999 is outside the vocabulary: ONNX Runtime's Gather fails on the whole batch
    sources = [record(i, [101, 2000 + i, 102]) for i in range(7)] + [record(7, [101, 99999, 102])]
    engine = OnnxRuntimeEngine(tiny.config, threads=1)
    out = handle_window(sources, engine, tiny.config, Topics("ns"), "w-0", BatchSettings(16, max_padding_waste=None))
    results = [decode(value(o), InferenceResult) for o in out if o.topic == "ns.results"]
    dead = [decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters"]
    assert sorted(r.record_id for r in results) == [f"r{i}" for i in range(7)]
    for r in results:
        ids = np.array([101, 2000 + r.seq, 102])
        np.testing.assert_allclose(r.arrays()["embedding"], tiny.expected(ids), atol=1e-6)
    (letter,) = dead
    assert (letter.stage, letter.record_id, letter.model, letter.model_version) == ("inference", "r7", "tiny", "1")
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("ns.tensors.tiny", 1, 107)
    assert "out of" in letter.error or "bounds" in letter.error


@pytest.mark.usefixtures("unchecked_ids")
def test_batches_run_side_by_side_on_the_cpu_give_the_results_of_one_at_a_time(tiny: TinyModel) -> None:
    """Two lanes (threads=2) run a window's batches concurrently: the same results, in the same
    batches, as one lane; a batch that fails in a lane is bisected like any other."""
    sources = [record(i, [101, *range(2000, 2000 + i % 5), 102]) for i in range(11)]
    sources.insert(6, record(11, [101, 99999, 102]))  # outside the vocabulary: fails its batch
    policy = BatchSettings(2, max_padding_waste=None)  # six executed batches of two
    lanes = OnnxRuntimeEngine(tiny.config, threads=2)
    assert lanes.lanes == 2
    outputs = {
        name: handle_window(sources, engine, tiny.config, Topics("ns"), "w-0", policy)
        for name, engine in (("one", OnnxRuntimeEngine(tiny.config, threads=1)), ("two", lanes))
    }
    got = {}
    for name, out in outputs.items():
        results = [decode(value(o), InferenceResult) for o in out if o.topic == "ns.results"]
        dead = [decode(value(o), DeadLetter) for o in out if o.topic == "ns.dead.letters"]
        got[name] = ([(r.record_id, r.batch_id) for r in results], [d.record_id for d in dead])
        for r in results:
            ids = np.array([101, *range(2000, 2000 + r.seq % 5), 102])
            np.testing.assert_allclose(r.arrays()["embedding"], tiny.expected(ids), atol=1e-6)
    assert got["two"] == got["one"]
    assert len(got["two"][0]) == 11 and got["two"][1] == ["r11"]


@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_cost_probes_count_a_batch_s_compute_not_time_off_the_core(tiny: TinyModel, threads: int) -> None:
    """The cost model's probes on the CPU time the one-core session that runs the lanes' batches
    in the probing thread's CPU time: a probe held off its core (the preprocess worker and the
    broker start beside the GPU worker in `nearline run`) is not a dearer batch."""
    engine = OnnxRuntimeEngine(tiny.config, threads=threads)
    attribute = "_lane_session" if threads > 1 else "_session"
    session = getattr(engine, attribute)
    runs = []

    class HeldOff:
        def run(self, names: list[str], inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
            runs.append(len(next(iter(inputs.values()))))
            time.sleep(0.3)  # as a core taken by another process for 300 ms
            return session.run(names, inputs)

    setattr(engine, attribute, HeldOff())
    seconds = engine.time_batch(pad_batch(tiny.config, [np.array([101, 7, 8, 102])] * 3).inputs)
    assert runs == [3]
    assert 0 < seconds < 0.3


def test_a_window_one_batch_dominates_runs_on_every_core_not_in_lanes(tiny: TinyModel) -> None:
    class Counting(OnnxRuntimeEngine):
        lane_runs = 0

        def _lane_run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            self.lane_runs += 1
            return super()._lane_run(inputs)

    engine = Counting(tiny.config, threads=2)
    even = [pad_batch(tiny.config, [np.array([101, 7, 102])] * 4).inputs] * 3
    skewed = [pad_batch(tiny.config, [np.array([101, 7, 102])] * rows).inputs for rows in (1, 2, 12)]
    want = [engine.infer(b) for b in skewed]
    got = list(engine.infer_many(skewed))
    assert engine.lane_runs == 0  # 12 rows of 15: more than half the work on one core would be slower
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a["token_embeddings"], b["token_embeddings"])
    list(engine.infer_many(even))
    assert engine.lane_runs == 3


def test_an_engine_that_fails_on_everything_is_a_fault_not_poison(tiny: TinyModel) -> None:
    class Broken(Engine):
        name = "broken"
        max_batch_size = 16
        pad_to_bucket = False
        postprocessed: tuple[str, ...] = ()

        def warmup(self) -> None:
            raise RuntimeError("engine cannot run at all")

        def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            raise RuntimeError("engine cannot run at all")

    with pytest.raises(RuntimeError, match="cannot run at all"):
        handle_window([record(i, [101, 7, 102]) for i in range(4)], Broken(), tiny.config, Topics(), "w-0")
    with pytest.raises(EngineFault):

        class OutOfMemory(Broken):
            def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

        handle_window([record(0, [101, 7, 102])], OutOfMemory(), tiny.config, Topics(), "w-0")
