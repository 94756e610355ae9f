"""A foreign TensorPack with a record whose id or attributes are not UTF-8: that record alone is a
dead letter, keyed to itself, its payload its own bytes; its neighbours get their results."""

from __future__ import annotations

import numpy as np

from gpu_consumer.batcher import BatchSettings
from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
from gpu_consumer.window_inference import handle_window
from kafka_io.records import ConsumedRecord
from kafka_io.topology import Topics
from schemas import DeadLetter, InferenceResult, Tensor, TensorRecord, decode, encode
from schemas.packs import PackHead, tensor_pack_bytes
from tests.support.records import value
from tests.support.tiny_model import TinyModel

STAMPS = {"submitted": 11, "preprocess_start": 12, "preprocess_end": 13}


def test_a_tensor_pack_record_that_is_not_utf8_is_dead_lettered_alone_and_its_neighbours_answered(
    tiny: TinyModel,
) -> None:
    arrays = [np.array([101, 2000 + i, 102]) for i in range(4)]
    ids, attributes = ["r0", "rQZ", "r2", "r3"], [{}, {}, {}, {"kXY": "v"}]
    data = tensor_pack_bytes(PackHead("job-p", "tiny", "1", "input_ids", STAMPS), ids, range(4), arrays, attributes)
    assert data.count(b"QZ") == data.count(b"XY") == 1
    data = data.replace(b"QZ", b"\xff\xfe").replace(b"XY", b"\xc3\x28")
    src = ConsumedRecord("ns.tensors.tiny", 1, 7, data, b"job-p/r0", (("records", b"4"),))
    engine = OnnxRuntimeEngine(tiny.config, threads=1)
    out = handle_window([src], engine, tiny.config, Topics("ns"), "w-0", BatchSettings(16, max_padding_waste=None))

    results = [decode(value(o), InferenceResult) for o in out if o.topic == "ns.results"]
    assert [r.record_id for r in results] == ["r0", "r2"]
    np.testing.assert_allclose(results[1].arrays()["embedding"], tiny.expected(arrays[2]), rtol=1e-5, atol=1e-6)
    letters = [(o.key, decode(value(o), DeadLetter)) for o in out if o.topic == "ns.dead.letters"]
    assert [(key, d.record_id, d.source_index, d.error_type) for key, d in letters] == [
        ("job-p/r\ufffd\ufffd".encode(), "r\ufffd\ufffd", 1, "NotUtf8Error"),
        (b"job-p/r3", "r3", 3, "NotUtf8Error"),
    ]
    assert "id is not UTF-8" in letters[0][1].error and "attributes are not UTF-8" in letters[1][1].error
    # the payload is the record alone with its bytes as they came
    tensors = (Tensor.from_array("input_ids", arrays[1]),)
    alone = encode(TensorRecord("job-p", "rQZ", 1, "tiny", "1", tensors, {}, STAMPS))
    assert letters[0][1].payload == alone.replace(b"QZ", b"\xff\xfe")
