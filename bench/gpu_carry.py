"""Builds .device/, what bench/gpu_check.sh needs on a GPU machine that reaches no package index.

    .venv/bin/python -m bench.gpu_carry text|images

The device tool carries at most 64 MiB, so each part travels alone: text = the project's Kafka
and serde wheels for Python 3.12, the Tansu binary (xz), MiniLM as FP16 TorchScript (xz) and
reference embeddings from ONNX Runtime here; images = EfficientNet-Lite0 as FP16 TorchScript and
reference top-5s. References are computed here in FP32 on the CPU, so the GPU is checked
against ONNX Runtime without carrying ONNX files.
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).parents[1]
DEVICE = ROOT / ".device"
WHEELS = [
    "confluent-kafka==2.16.1",
    "fastavro==1.13.1",
    "faust-streaming==0.15.3",
    "mode-streaming==0.7.1",
    "aiokafka==0.14.0",
    "venusian==3.1.0",
    "terminaltables==3.1.10",
    "intervaltree==3.2.1",
    "aiohttp-cors==0.8.1",
    "croniter==5.0.1",
    "colorlog==6.12.0",
    "async-timeout==5.0.1",
]
LIMIT = 62 * 2**20  # the tool carries 64 MiB with the tracked files (about 1.5 MiB)
TEXTS = 512


def fp16_torchscript(config_dir: Path, out_dir: Path) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(config_dir / "model.pt")).half()
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "model.pt.tmp"
    torch.jit.save(module, str(tmp))
    with tmp.open("rb") as src, lzma.open(out_dir / "model.pt.xz", "wb", preset=6) as dst:
        shutil.copyfileobj(src, dst)
    tmp.unlink()
    for name in ("config.json", "tokenizer.json", "labels.txt"):
        if (config_dir / name).exists():
            shutil.copy2(config_dir / name, out_dir / name)


def text_part(repository: Path) -> None:
    from gpu_consumer.batcher import make_batch
    from gpu_consumer.engine import OnnxRuntimeEngine
    from gpu_consumer.postprocess import postprocess
    from jobs.runner import ensure_model
    from kafka_io.broker import tansu_binary
    from preprocess_app.models import load_tokenizer
    from preprocess_app.text import tokenize

    config = ensure_model(repository, "minilm", print)
    fp16_torchscript(config.directory, DEVICE / "models" / "minilm" / "1")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            "--platform",
            "manylinux_2_28_x86_64",
            "--platform",
            "manylinux_2_17_x86_64",
            "--platform",
            "manylinux2014_x86_64",
            "--platform",
            "manylinux1_x86_64",
            "-d",
            str(DEVICE / "wheels"),
            *WHEELS,
        ],
        check=True,
    )
    with tansu_binary().open("rb") as src, lzma.open(DEVICE / "tansu.xz", "wb", preset=6) as dst:
        shutil.copyfileobj(src, dst)
    rows = [json.loads(line) for line in (ROOT / "producers/examples/python-docs-paragraphs.jsonl").open()][:TEXTS]
    ids = tokenize(
        load_tokenizer(config.tokenizer_path, config.max_length), [r["text"] for r in rows], config.max_length
    )
    engine = OnnxRuntimeEngine(config)
    embeddings = []
    for start in range(0, len(ids), 32):
        batch = make_batch(config, ids[start : start + 32])
        embeddings += [o.tensors[0].to_array() for o in postprocess(config, engine.infer(batch.inputs), batch)]
    np.savez_compressed(DEVICE / "reference_text.npz", embeddings=np.stack(embeddings))


def image_part(repository: Path) -> None:
    from gpu_consumer.batcher import make_batch
    from gpu_consumer.engine import OnnxRuntimeEngine
    from jobs.runner import ensure_model
    from preprocess_app.image import decode_image
    from tests.image_corpus import real_photos

    config = ensure_model(repository, "efficientnet-lite0", print)
    assert config.image is not None
    fp16_torchscript(config.directory, DEVICE / "models" / "efficientnet-lite0" / "1")
    photos = real_photos()
    crops = [decode_image(p.read_bytes(), config.image) for p in photos]
    logits = OnnxRuntimeEngine(config).infer(make_batch(config, crops).inputs)["logits"]
    np.savez_compressed(
        DEVICE / "reference_images.npz", crops=np.stack(crops), logits=logits, names=np.array([p.name for p in photos])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["text", "images"])
    parser.add_argument("--model-repository", type=Path, default=ROOT / "models")
    args = parser.parse_args()
    shutil.rmtree(DEVICE, ignore_errors=True)
    DEVICE.mkdir()
    (text_part if args.part == "text" else image_part)(args.model_repository)
    size = sum(f.stat().st_size for f in DEVICE.rglob("*") if f.is_file())
    print(f".device/ holds {size / 2**20:.1f} MiB for the {args.part} part")
    if size > LIMIT:
        raise SystemExit(f".device/ is over {LIMIT / 2**20:.0f} MiB: the device tool would refuse it")


if __name__ == "__main__":
    main()
