"""Engines against each other on the same batches, and the TensorRT planning that needs no TensorRT."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gpu_consumer.batcher import BatchSettings, bucket_of, make_batch, plan_batches, shaped_batch
from gpu_consumer.engines.factory import CUDA_BATCH_ROWS, CUDA_BATCH_TOKENS, batch_limits
from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
from gpu_consumer.engines.protocol import EngineLoadError
from gpu_consumer.engines.torch_engine import (
    TORCHSCRIPT_FILE,
    TORCHSCRIPT_FP16_FILE,
    TorchEngine,
    batch_bucket,
    graph_shapes,
    pad_rows,
    torchscript_path,
)
from gpu_consumer.trt_plan import derive_profiles, engine_cache_key, plan_buffers, profile_for
from model_repository.config import ModelConfig
from model_repository.folders import load_model_config
from tests.support.references import TEXTS, image_batch, text_batch


def test_the_torch_engine_matches_onnx_runtime_on_cpu(minilm: ModelConfig, efficientnet: ModelConfig) -> None:
    for config, batch in ((minilm, text_batch(minilm)), (efficientnet, image_batch(efficientnet))):
        name = config.outputs[0].name
        want = OnnxRuntimeEngine(config, threads=1).infer(batch)[name]
        got = TorchEngine(config, device="cpu", postprocess_on_device=False).infer(batch)[name]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=2e-4, err_msg=config.name)


def test_pooling_in_the_engine_gives_the_embeddings_of_pooling_on_the_cpu(minilm: ModelConfig) -> None:
    from gpu_consumer.postprocess import postprocess

    batch = text_batch(minilm)
    padded = make_batch(
        minilm, [row[: int(m.sum())] for row, m in zip(batch["input_ids"], batch["attention_mask"], strict=True)]
    )
    engine = TorchEngine(minilm, device="cpu")
    assert engine.postprocessed == ("mean_pooling", "l2_normalize")
    pooled = engine.infer(padded.inputs)[minilm.outputs[0].name]
    assert pooled.shape == (len(TEXTS), 384)  # what a GPU copies back: no sequence axis
    raw = TorchEngine(minilm, device="cpu", postprocess_on_device=False).infer(padded.inputs)
    want = postprocess(minilm, raw, padded, ()).tensors[0].rows
    got = postprocess(minilm, {minilm.outputs[0].name: pooled}, padded, engine.postprocessed).tensors[0].rows
    np.testing.assert_allclose(got, want, atol=1e-6)


def assert_same_embeddings_and_labels(
    minilm: ModelConfig, efficientnet: ModelConfig, engine: Callable[[ModelConfig], TorchEngine]
) -> None:
    """Cosine >= 0.999 to ONNX Runtime for every MiniLM embedding; the same top-1 for every photo."""
    from gpu_consumer.postprocess import postprocess

    batch = text_batch(minilm)
    padded = make_batch(
        minilm, [row[: int(m.sum())] for row, m in zip(batch["input_ids"], batch["attention_mask"], strict=True)]
    )
    want = postprocess(minilm, OnnxRuntimeEngine(minilm).infer(padded.inputs), padded, ())
    text_engine = engine(minilm)
    assert text_engine.postprocessed == ("mean_pooling", "l2_normalize")  # pooled where it runs
    got = postprocess(minilm, text_engine.infer(padded.inputs), padded, text_engine.postprocessed)
    for a, b in zip(want.tensors[0].rows, got.tensors[0].rows, strict=True):
        assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) >= 0.999
    images = image_batch(efficientnet)
    want_top = OnnxRuntimeEngine(efficientnet).infer(images)["logits"].argmax(axis=1)
    got_top = engine(efficientnet).infer(images)["logits"].argmax(axis=1)
    assert got_top.tolist() == want_top.tolist()


def test_the_fp16_torchscript_matches_onnx_runtime_on_cpu(minilm: ModelConfig, efficientnet: ModelConfig) -> None:
    """The file the GPU runs, run on the CPU: it must be a real FP16 trace, not FP32 halved."""

    def fp16(config: ModelConfig) -> TorchEngine:
        engine = TorchEngine(config, device="cpu", precision="fp16")
        assert engine.precision == "fp16", f"{config.name} has no FP16 TorchScript"
        return engine

    assert_same_embeddings_and_labels(minilm, efficientnet, fp16)


def test_the_torch_engine_loads_the_precision_there_is(tmp_path: Path) -> None:
    (tmp_path / TORCHSCRIPT_FP16_FILE).write_bytes(b"")
    assert torchscript_path(tmp_path, "fp32") == (tmp_path / TORCHSCRIPT_FP16_FILE, "fp16")
    (tmp_path / TORCHSCRIPT_FILE).write_bytes(b"")
    assert torchscript_path(tmp_path, "fp32") == (tmp_path / TORCHSCRIPT_FILE, "fp32")
    with pytest.raises(EngineLoadError, match="prepare the model again"):
        torchscript_path(tmp_path / "empty", "fp16")


@pytest.mark.gpu
def test_the_torch_engine_on_cuda_in_fp16_matches_onnx_runtime(minilm: ModelConfig, efficientnet: ModelConfig) -> None:
    assert_same_embeddings_and_labels(minilm, efficientnet, TorchEngine)


def test_rows_are_padded_to_a_power_of_two_with_a_real_token_each() -> None:
    assert [batch_bucket(n, 64) for n in (1, 3, 4, 33, 64, 70)] == [1, 4, 4, 64, 64, 64]
    padded = pad_rows({"input_ids": np.ones((3, 5), np.int64), "attention_mask": np.ones((3, 5), np.int64)}, 4)
    assert padded["input_ids"].shape == (4, 5)
    assert padded["attention_mask"][3].tolist() == [1, 0, 0, 0, 0]


def test_the_cuda_warmup_covers_every_shape_a_batch_can_take(minilm: ModelConfig, efficientnet: ModelConfig) -> None:
    shapes = graph_shapes(minilm, 48)
    assert shapes[:8] == [(48, 256), (32, 256), (16, 256), (8, 256), (4, 256), (2, 256), (1, 256), (48, 128)]
    assert len(shapes) == len(set(shapes)) == 7 * 5
    met = {(batch_bucket(n, 48), bucket_of(width, minilm.buckets)) for n in range(1, 49) for width in range(1, 257)}
    assert met == set(shapes)
    assert {rows for rows, _ in graph_shapes(efficientnet, 64)} == {1, 2, 4, 8, 16, 32, 64}
    assert len(graph_shapes(efficientnet, 64)) == 7
    assert shaped_batch(minilm, 4, 32).inputs["input_ids"].shape == (4, 32)
    assert shaped_batch(efficientnet, 2, 0).inputs["pixels"].shape[0] == 2


def test_under_a_token_budget_the_cuda_warmup_covers_the_batches_the_planner_forms(minilm: ModelConfig) -> None:
    shapes = graph_shapes(minilm, 512, 16384)
    # a 32-token bucket takes 512 rows; a 256-token one 64, as the old fixed bound did
    assert (512, 32) in shapes and (64, 256) in shapes and (128, 256) not in shapes
    assert min(rows for rows, length in shapes if length == 256) == 1  # one record alone is always a batch
    # every executed batch the planner cuts under that budget, padded to its buckets, is a captured shape
    policy = BatchSettings(512, 16384)
    for width in (5, 20, 33, 64, 100, 200, 256):
        lengths = [width] * 700
        for rows in plan_batches(lengths, policy, minilm.buckets, pad_to_bucket=True):
            assert (batch_bucket(len(rows), 512), bucket_of(width, minilm.buckets)) in shapes


def test_only_the_torch_engine_on_cuda_lets_a_token_budget_bound_a_batch_by_default(
    minilm: ModelConfig, efficientnet: ModelConfig
) -> None:
    assert batch_limits(minilm, "cuda-torch", None, None) == (CUDA_BATCH_ROWS, CUDA_BATCH_TOKENS)
    assert batch_limits(minilm, "cuda-torch", 32, None) == (32, None)  # what a user asks for stands
    assert batch_limits(minilm, "onnxruntime", None, None) == (minilm.max_batch_size, None)
    assert batch_limits(minilm, "tensorrt", None, None) == (minilm.max_batch_size, None)
    assert batch_limits(efficientnet, "cuda-torch", None, None) == (efficientnet.max_batch_size, None)


def warmed_shapes(engine: TorchEngine, monkeypatch: pytest.MonkeyPatch, fail_at: int, error: Exception) -> list:
    """The input shapes engine.warmup() runs, as on CUDA (a graph per shape; the CPU runs the same
    calls eagerly), with the fail_at-th call raising `error`."""
    engine.cuda_graphs = True
    shapes: list[tuple[int, ...]] = []

    def infer(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        shapes.append(inputs["input_ids"].shape)
        if len(shapes) == fail_at:
            raise error
        return {}

    monkeypatch.setattr(engine, "infer", infer)
    return shapes


@pytest.mark.parametrize("raised_as", ["OutOfMemoryError", "TorchScript's RuntimeError"])
def test_a_warm_up_out_of_gpu_memory_says_which_shape_and_what_to_change(
    minilm: ModelConfig, monkeypatch: pytest.MonkeyPatch, raised_as: str
) -> None:
    import torch

    oom = "CUDA out of memory. Tried to allocate 96.00 MiB"
    error: Exception = torch.cuda.OutOfMemoryError(oom)
    if raised_as != "OutOfMemoryError":  # what a TorchScript module raises for the same (torch 2.11, H200)
        error = RuntimeError(f"The following operation failed in the TorchScript interpreter.\nRuntimeError: {oom}")
    engine = TorchEngine(minilm, device="cpu")
    shapes = warmed_shapes(engine, monkeypatch, 3, error)
    with pytest.raises(EngineLoadError, match=r"16 rows of 256 tokens \(2 of 35 shapes captured\)") as caught:
        engine.warmup()
    assert shapes == [(64, 256), (32, 256), (16, 256)]  # largest first: a device too small fails at once
    assert "--max-batch-size" in str(caught.value) and str(minilm.directory / "config.json") in str(caught.value)
    assert str(caught.value).endswith(f"{oom})")  # the error's last line, not a TorchScript traceback

    other = TorchEngine(minilm, device="cpu")
    warmed_shapes(other, monkeypatch, 1, RuntimeError("expected scalar type Long"))
    with pytest.raises(RuntimeError, match="scalar type"):  # not a memory error: as it was
        other.warmup()


def test_a_worker_limit_below_the_models_warms_only_the_shapes_it_forms(
    minilm: ModelConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = TorchEngine(minilm, device="cpu", max_batch_size=8)
    shapes = warmed_shapes(engine, monkeypatch, 0, RuntimeError())
    engine.warmup()
    assert len(shapes) == 4 * 5 and shapes[0] == (8, 256) and max(rows for rows, _ in shapes) == 8
    assert TorchEngine(minilm, device="cpu", max_batch_size=1000).max_batch_size == minilm.max_batch_size


def test_tensorrt_profiles_follow_the_length_buckets(minilm: ModelConfig, efficientnet: ModelConfig) -> None:
    profiles = derive_profiles(minilm, 64)
    assert [p.width for p in profiles] == [(1, 16), (17, 32), (33, 64), (65, 128), (129, 256)]
    ids = profiles[2].inputs[0]
    assert (ids.name, ids.min, ids.opt, ids.max) == ("input_ids", (1, 33), (64, 64), (64, 64))
    assert [profile_for(profiles, w) for w in (1, 16, 17, 200, 256)] == [0, 0, 1, 4, 4]
    with pytest.raises(ValueError, match="257"):
        profile_for(profiles, 257)
    (image,) = derive_profiles(efficientnet, 32)
    assert image.inputs[0].min == (1, 3, 224, 224) and image.inputs[0].max == (32, 3, 224, 224)
    assert profile_for([image], 0) == 0


def test_tensorrt_cache_key_changes_with_every_fact_that_invalidates_an_engine(minilm: ModelConfig) -> None:
    profiles = derive_profiles(minilm, 64)
    base = ("ab" * 32, "10.3.0", "NVIDIA H200", (9, 0), "fp16", profiles)
    key = engine_cache_key(*base)
    assert key == engine_cache_key(*base)  # stable across restarts
    changed = [
        ("cd" * 32, *base[1:]),
        (base[0], "10.4.0", *base[2:]),
        (*base[:2], "NVIDIA A100", *base[3:]),
        (*base[:3], (8, 0), *base[4:]),
        (*base[:4], "fp32", base[5]),
        (*base[:5], derive_profiles(minilm, 32)),
    ]
    assert len({engine_cache_key(*c) for c in changed} | {key}) == len(changed) + 1


def test_tensorrt_buffers_are_planned_at_the_largest_shapes(minilm: ModelConfig, efficientnet: ModelConfig) -> None:
    buffers = {b.name: b for b in plan_buffers(minilm, derive_profiles(minilm, 64))}
    assert buffers["input_ids"].shape == (64, 256) and buffers["input_ids"].nbytes == 64 * 256 * 8
    assert buffers["token_embeddings"].shape == (64, 256, 384)
    image = {b.name: b for b in plan_buffers(efficientnet, derive_profiles(efficientnet, 16))}
    assert image["pixels"].nbytes == 16 * 3 * 224 * 224 and image["logits"].shape == (16, 1000)


def test_the_tensorrt_engine_says_what_to_install_when_tensorrt_is_missing(minilm: ModelConfig) -> None:
    pytest.importorskip("torch")
    try:
        import tensorrt  # noqa: F401

        pytest.skip("TensorRT is installed here")
    except ImportError:
        pass
    from gpu_consumer.engines.tensorrt_engine import TensorRTEngine

    with pytest.raises(EngineLoadError, match="NVIDIA TensorRT 10 for Python"):
        TensorRTEngine(minilm)


def test_the_tensorrt_engine_refuses_a_model_folder_without_its_onnx_file(minilm: ModelConfig, tmp_path: Path) -> None:
    from gpu_consumer.engines.tensorrt_engine import TensorRTEngine

    folder = tmp_path / "minilm" / "1"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(minilm.to_json(), encoding="utf-8")  # a carry with no model.onnx
    config = load_model_config(tmp_path, "minilm")
    with pytest.raises(EngineLoadError, match=r"model\.onnx is missing: TensorRT builds its engine from"):
        TensorRTEngine(config)
