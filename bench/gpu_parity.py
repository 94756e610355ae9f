"""On the GPU machine: the GPU engines against ONNX Runtime's references computed on the CPU.

    python3 -m bench.gpu_parity text|images --repository .device/models

text: MiniLM in FP16 (on CUDA; on the CPU in the dry run), cosine >= 0.999 to ONNX Runtime FP32
for every reference text.
images: EfficientNet-Lite0 in FP16, top-1 identical on every reference photo.
TensorRT is tried too where it imports. Prints figures and exits non-zero on a failed check.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from gpu_consumer.batcher import make_batch
from gpu_consumer.engine import Engine, EngineLoadError, make_engine
from gpu_consumer.postprocess import postprocess
from preprocess_app.models import load_tokenizer
from preprocess_app.text import tokenize
from schemas.model_config import ModelConfig, load_model_config

ROOT = Path(__file__).parents[1]


def fp16_engine(config: ModelConfig, kind: str) -> tuple[Engine, dict[str, str]]:
    """The engine under test, warmed up, and how it runs: the torch engine always in FP16, which
    is what the GPU runs, even where the dry run has only a CPU."""
    if kind == "torch":
        from gpu_consumer.torch_engine import TorchEngine

        torch_engine = TorchEngine(config, precision="fp16")
        engine: Engine = torch_engine
        how = {"device": str(torch_engine.device), "precision": torch_engine.precision}
    else:
        engine, how = make_engine(config, kind), {"device": "cuda", "precision": "fp16"}
    engine.warmup()
    return engine, how


def check_text(repository: Path, kind: str) -> dict[str, object]:
    config = load_model_config(repository, "minilm")
    want = np.load(ROOT / ".device" / "reference_text.npz")["embeddings"]
    rows = [json.loads(line) for line in (ROOT / "producers/examples/python-docs-paragraphs.jsonl").open()]
    ids = tokenize(
        load_tokenizer(config.tokenizer_path, config.max_length),
        [r["text"] for r in rows[: len(want)]],
        config.max_length,
    )
    engine, how = fp16_engine(config, kind)
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


def check_images(repository: Path, kind: str) -> dict[str, object]:
    config = load_model_config(repository, "efficientnet-lite0")
    ref = np.load(ROOT / ".device" / "reference_images.npz")
    engine, how = fp16_engine(config, kind)
    logits = engine.infer(make_batch(config, list(ref["crops"])).inputs)["logits"]
    same = logits.argmax(axis=1) == ref["logits"].argmax(axis=1)
    return {
        "engine": kind,
        **how,
        "model": "efficientnet-lite0",
        "images": len(same),
        "top1_identical": int(same.sum()),
        "passed": bool(same.all()),
        "max_abs_logit_diff": float(np.abs(logits - ref["logits"]).max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["text", "images"])
    parser.add_argument("--repository", type=Path, default=ROOT / ".device" / "models")
    args = parser.parse_args()
    check = check_text if args.part == "text" else check_images
    reports = [check(args.repository, "torch")]
    try:
        reports.append(check(args.repository, "tensorrt"))
    except EngineLoadError as exc:
        reports.append({"engine": "tensorrt", "skipped": str(exc)})
    for r in reports:
        print(json.dumps(r))
    if not all(r.get("passed", True) for r in reports):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
