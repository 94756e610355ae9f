"""The hot-path result encoder against the reference: serde.encode of the same InferenceResult."""

from __future__ import annotations

import io

import numpy as np
from fastavro import schemaless_reader

from schemas import InferenceResult, Tensor, decode, encode
from schemas.result_encoding import ResultEncoder, RowTensor, avro_long, encoded_ids, encoded_maps
from schemas.serde import HEADER_LEN, registry


def test_avro_long_matches_fastavro_at_the_edges() -> None:
    schema = {"type": "long"}
    edges = [0, 1, -1, 63, -64, 64, -65, 8191, 8192, -8193, 2**31 - 1, -(2**31), 1_700_000_000_000_000]
    powers = [sign * (2**k + d) for k in range(63) for d in (-1, 0, 1) for sign in (1, -1)]
    for n in [*edges, *powers, 2**63 - 1, -(2**63)]:
        assert schemaless_reader(io.BytesIO(avro_long(n)), schema, None) == n, n


def test_encoded_batches_read_back_as_the_results_serde_would_write() -> None:
    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((3, 5)).astype(np.float32)
    top_index = np.array([[3, 1], [0, 2], [4, 4]], dtype=np.int64)
    top_score = rng.random((3, 2)).astype(np.float32)
    ids = [("job-é", "r0", 0), ("job-é", "r1", -7), ("j", "ü" * 300, 2**40)]
    attributes = [{}, {"lang": "en", "ключ": "значение"}, {"k": "v" * 1000}]
    timestamps = [{}, {"submitted": 1, "preprocess_end": 1_700_000_000_000_000}, {"batch_formed": 5}]
    shared = {"batch_formed": 10, "inference_start": 11, "inference_end": 12, "result_produced": 13}
    encoder = ResultEncoder("minilm", "2")
    for outputs, labels in [
        ([RowTensor("embedding", embeddings)], None),
        ([RowTensor("top_index", top_index), RowTensor("top_score", top_score)], [("cat", "dog"), ("a",), ()]),
    ]:
        got = encoder.encode_batch(
            ids=[encoded_ids(*i) for i in ids],
            outputs=outputs,
            labels=labels,
            batch_id="host-1-0.3",
            lengths=[4, 9, 0],
            padded_length=9,
            maps=[encoded_maps(a, t) for a, t in zip(attributes, timestamps, strict=True)],
            batch_timestamps=shared,
        )
        for row, value in enumerate(got):
            want = InferenceResult(
                job_id=ids[row][0],
                record_id=ids[row][1],
                seq=ids[row][2],
                model="minilm",
                model_version="2",
                outputs=tuple(Tensor.from_array(t.name, t.rows[row]) for t in outputs),
                batch_id="host-1-0.3",
                batch_size=3,
                attributes=attributes[row],
                timestamps={**timestamps[row], **shared},
                labels=tuple(labels[row]) if labels else (),
                length=[4, 9, 0][row],
                padded_length=9,
            )
            assert decode(value, InferenceResult) == want
            # a plain Avro reader (no nearline code) reads it too, to the same fields
            plain = schemaless_reader(
                io.BytesIO(value[HEADER_LEN:]), registry().current("nearline.InferenceResult").parsed, None
            )
            assert plain == want.to_avro()
            assert value[:HEADER_LEN] == encode(want)[:HEADER_LEN]


def test_a_batchs_results_are_serdes_bytes_with_the_generation_fields_at_their_defaults() -> None:
    """Records without timestamps of their own (one timestamps block, as serde writes it): the
    same bytes as serde.encode, the current schema's, ending in the four defaults; fastavro reads
    those fields as "", "", 0, 0."""
    vectors = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = ResultEncoder("minilm", "1").encode_batch(
        ids=[encoded_ids("job", "a", 0), encoded_ids("job", "b", 1)],
        outputs=[RowTensor("embedding", vectors)],
        labels=None,
        batch_id="w:1",
        lengths=[3, 4],
        padded_length=4,
        maps=[encoded_maps({}, {}), encoded_maps({"n": "1"}, {})],
        batch_timestamps={"batch_formed": 5, "inference_end": 6},
    )
    for row, value in enumerate(got):
        want = InferenceResult(
            "job",
            "ab"[row],
            row,
            "minilm",
            "1",
            (Tensor.from_array("embedding", vectors[row]),),
            "w:1",
            2,
            [{}, {"n": "1"}][row],
            {"batch_formed": 5, "inference_end": 6},
            length=[3, 4][row],
            padded_length=4,
        )
        assert value == encode(want)
        assert value.endswith(b"\x00\x00\x00\x00")
        plain = schemaless_reader(
            io.BytesIO(value[HEADER_LEN:]), registry().current("nearline.InferenceResult").parsed, None
        )
        assert isinstance(plain, dict)
        names = ("text", "finish_reason", "completion_tokens", "cached_prompt_tokens")
        assert [plain[name] for name in names] == ["", "", 0, 0]
