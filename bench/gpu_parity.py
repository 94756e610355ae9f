"""On the GPU machine: the GPU engines against ONNX Runtime's references computed on the CPU.

    python3 -m bench.gpu_parity text|images --repository .device/models

text: MiniLM in FP16, cosine >= 0.999 to ONNX Runtime FP32 for every reference text,
and an imported text classifier (bench/gpu_carry.py) in FP16, scores within 0.01 of ONNX
Runtime FP32 and the same top label.
images: EfficientNet-Lite0 in FP16, top-1 identical on every reference photo.
TensorRT is tried too where it imports. Prints figures and exits non-zero on a failed check.

On the CPU (bench/gpu_dryrun.sh) the torch engine takes the FP32 TorchScript where the carry holds
it (gpu_carry --fp32): a CPU without fast FP16 arithmetic runs FP16 ~45x slower. The same checks,
at the FP16 tolerances, which FP32 meets too; then the carried FP16 file on the first few
references (FP16_ON_CPU), so what the device loads is still loaded and checked here.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from gpu_consumer.batcher import make_batch
from gpu_consumer.engines.factory import make_engine
from gpu_consumer.engines.protocol import Engine, EngineLoadError
from gpu_consumer.postprocess import postprocess
from model_repository.config import ModelConfig
from model_repository.folders import load_model_config
from preprocess_app.models import load_tokenizer
from preprocess_app.text import tokenize

ROOT = Path(__file__).parents[1]
BYO_CLASSIFIER = "byo-classifier"  # what bench/gpu_carry.py imports it as
FP16_ON_CPU = 8  # references the FP16 file is checked on where the CPU ran the FP32 one: seconds, not minutes


def engine_under_test(config: ModelConfig, kind: str, precision: str | None) -> tuple[Engine, dict[str, str]]:
    """The engine under test and how it runs. The torch engine's own choice unless `precision`
    is given: FP16 on CUDA, on the CPU FP32 where the carry holds it (the dry run). Warmed up,
    except for FP16 asked for on the CPU, whose warm-up (the largest batch) alone takes minutes."""
    if kind == "torch":
        from gpu_consumer.engines.torch_engine import TorchEngine

        torch_engine = TorchEngine(config, precision=precision)
        engine: Engine = torch_engine
        how = {"device": str(torch_engine.device), "precision": torch_engine.precision}
    else:
        engine, how = make_engine(config, kind), {"device": "cuda", "precision": "fp16"}
    if precision is None or how["device"] != "cpu":
        engine.warmup()
    return engine, how


def token_ids(config: ModelConfig, n: int) -> list[np.ndarray]:
    """The first n example paragraphs, tokenized for `config` as the preprocess worker would."""
    rows = [json.loads(line) for line in (ROOT / "producers/examples/python-docs-paragraphs.jsonl").open()]
    return tokenize(
        load_tokenizer(config.tokenizer_path, config.max_length), [r["text"] for r in rows[:n]], config.max_length
    )


def check_text(
    repository: Path, kind: str, precision: str | None = None, first: int | None = None
) -> dict[str, object]:
    """`first`: only the first references (all by default)."""
    config = load_model_config(repository, "minilm")
    # carried in float16 (bench/gpu_carry.py); the cosine is computed in float32
    want = np.load(ROOT / ".device" / "reference_text.npz")["embeddings"][:first].astype(np.float32)
    ids = token_ids(config, len(want))
    engine, how = engine_under_test(config, kind, precision)
    got = []
    t0 = time.perf_counter()
    for start in range(0, len(ids), 64):
        batch = make_batch(config, ids[start : start + 64])
        got += list(postprocess(config, engine.infer(batch.inputs), batch, engine.postprocessed).tensors[0].rows)
    seconds = time.perf_counter() - t0
    cosine = (np.stack(got) * want).sum(axis=1) / np.linalg.norm(want, axis=1)
    return {
        "engine": kind,
        **how,
        "model": "minilm",
        "records": len(got),
        "min_cosine": float(cosine.min()),
        "passed": bool(cosine.min() >= 0.999),
        "records_per_s_batch64": len(got) / seconds,
    }


def check_classifier(
    repository: Path, kind: str, precision: str | None = None, first: int | None = None
) -> dict[str, object]:
    """The classifier `models import` made from a seeded transformers folder (bench/gpu_carry.py):
    scores within 0.01 of ONNX Runtime FP32's softmax, and the same top label wherever the
    reference's top two are more than 0.02 apart (its random head leaves some texts near a tie)."""
    config = load_model_config(repository, BYO_CLASSIFIER)
    logits = np.load(ROOT / ".device" / "reference_classifier.npz")["logits"][:first]
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    want = exp / exp.sum(axis=1, keepdims=True)
    ids = token_ids(config, len(want))
    engine, how = engine_under_test(config, kind, precision)
    order, scores = [], []  # what a result carries: label indices best first, and their scores
    for start in range(0, len(ids), 64):
        batch = make_batch(config, ids[start : start + 64])
        top_index, top_score = postprocess(config, engine.infer(batch.inputs), batch, engine.postprocessed).tensors
        order += list(top_index.rows)
        scores += list(top_score.rows)
    top2 = np.sort(want, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 0.02
    same = np.stack(order)[:, 0] == want.argmax(axis=1)
    worst = float(np.abs(np.stack(scores) - np.take_along_axis(want, np.stack(order), axis=1)).max())
    return {
        "engine": kind,
        **how,
        "model": BYO_CLASSIFIER,
        "task": config.task,
        "records": len(order),
        "max_score_diff": worst,
        "top1_identical": int(same.sum()),
        "top1_clear": int(clear.sum()),
        "passed": bool(worst <= 0.01 and same[clear].all()),
    }


def check_images(
    repository: Path, kind: str, precision: str | None = None, first: int | None = None
) -> dict[str, object]:
    config = load_model_config(repository, "efficientnet-lite0")
    ref = np.load(ROOT / ".device" / "reference_images.npz")
    crops, want = ref["crops"][:first], ref["logits"][:first]
    engine, how = engine_under_test(config, kind, precision)
    logits = engine.infer(make_batch(config, list(crops)).inputs)["logits"]
    same = logits.argmax(axis=1) == want.argmax(axis=1)
    return {
        "engine": kind,
        **how,
        "model": "efficientnet-lite0",
        "images": len(same),
        "top1_identical": int(same.sum()),
        "passed": bool(same.all()),
        "max_abs_logit_diff": float(np.abs(logits - want).max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["text", "images"])
    parser.add_argument("--repository", type=Path, default=ROOT / ".device" / "models")
    args = parser.parse_args()
    checks = (check_text, check_classifier) if args.part == "text" else (check_images,)
    reports = []
    for check in checks:
        reports.append(check(args.repository, "torch"))
        if reports[-1]["device"] == "cpu" and reports[-1]["precision"] == "fp32":
            # the dry run: the FP16 file the device runs, unpacked from its planes, on a few references
            reports.append(check(args.repository, "torch", precision="fp16", first=FP16_ON_CPU))
        try:
            reports.append(check(args.repository, "tensorrt"))
        except EngineLoadError as exc:
            reports.append({"engine": "tensorrt", "model": check.__name__, "skipped": str(exc)})
    for r in reports:
        print(json.dumps(r))
    if not all(r.get("passed", True) for r in reports):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
