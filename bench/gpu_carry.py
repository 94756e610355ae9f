"""Builds .device/, what bench/gpu_check.sh needs on a GPU machine that reaches no package index.

    .venv/bin/python -m bench.gpu_carry text|images [--texts N] [--fp32]

.device/ is git-ignored, so the device tool sends it only when a run names it in `carry`
(docs/benchmarks.md, "On a GPU machine"). The tool carries at most 64 MiB with the tracked files, so each
part travels alone, and this script refuses a carry that would not fit. text = the wheels the
GPU image lacks for Python 3.12 (our Kafka client, serde and faust with what they import), the
Tansu binary, MiniLM as its FP16 TorchScript and reference embeddings from ONNX Runtime here, and a
small text classifier imported with `models import` (its FP16 TorchScript and reference logits);
images = the same wheels, EfficientNet-Lite0 as FP16 TorchScript and reference top-5s. Large files are packed
(bench/device_pack.py); gpu_check.sh unpacks them outside .device/. References are computed here in FP32
on the CPU, so the GPU is checked against ONNX Runtime without carrying ONNX files.

--fp32 (bench/gpu_dryrun.sh only) adds each model's FP32 TorchScript (model.pt, as it is) for the
CPU dry run: a CPU without fast FP16 arithmetic runs the FP16 file ~45x slower. Such a .device/ is
over the tool's limit and never sent; the size check counts it without the FP32 files, which is
the carry the device gets.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.device_pack import pack
from schemas.model_config import TORCHSCRIPT_FILE, TORCHSCRIPT_FP16_FILE, ModelConfig

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
    "pytz==2025.2",  # croniter imports it, and the GPU image has none
    "colorlog==6.12.0",
    "async-timeout==5.0.1",
    "prometheus-client==0.26.0",  # kafka_io.metrics: every worker imports it
    "orjson==3.13.0",  # jobs.results: JSON Lines results
]
TOOL_LIMIT = 64 * 2**20
MARGIN = 2**20  # the tool refused a carry counted here at 64.0 MiB: it counts a little more than we do


def carry_model(config: ModelConfig, fp32: bool) -> None:
    """The model's FP16 TorchScript (packed), config and tokenizer or labels, into .device/models/;
    with fp32 its FP32 TorchScript too, unpacked (the dry run's, never the device's: dry_run_only)."""
    names = [TORCHSCRIPT_FP16_FILE, *([TORCHSCRIPT_FILE] if fp32 else [])]
    for name in names:
        if not (config.directory / name).is_file():
            raise SystemExit(f"{config.directory / name} is missing: run `nearline models prepare {config.name}` again")
    out_dir = DEVICE / "models" / config.name / config.version
    out_dir.mkdir(parents=True, exist_ok=True)
    pack(config.directory / TORCHSCRIPT_FP16_FILE, out_dir, fp16=True)
    if fp32:
        shutil.copy2(config.directory / TORCHSCRIPT_FILE, out_dir / TORCHSCRIPT_FILE)
    for name in ("config.json", "tokenizer.json", "labels.json", "labels.txt"):
        if (config.directory / name).exists():
            shutil.copy2(config.directory / name, out_dir / name)


def carry_wheels() -> None:
    """The wheels the GPU image lacks, for its Python 3.12: every part imports schemas (fastavro)."""
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


def text_part(repository: Path, texts: int, fp32: bool) -> None:
    from gpu_consumer.batcher import make_batch
    from gpu_consumer.onnxruntime_engine import OnnxRuntimeEngine
    from gpu_consumer.postprocess import postprocess
    from jobs.launch.runner import ensure_model
    from kafka_io.broker import tansu_binary
    from preprocess_app.models import load_tokenizer
    from preprocess_app.text import tokenize

    config = ensure_model(repository, "minilm", print)
    carry_model(config, fp32)
    pack(tansu_binary(), DEVICE)
    rows = [json.loads(line) for line in (ROOT / "producers/examples/python-docs-paragraphs.jsonl").open()][:texts]
    ids = tokenize(
        load_tokenizer(config.tokenizer_path, config.max_length), [r["text"] for r in rows], config.max_length
    )
    engine = OnnxRuntimeEngine(config)
    embeddings = []
    for start in range(0, len(ids), 32):
        batch = make_batch(config, ids[start : start + 32])
        embeddings += list(postprocess(config, engine.infer(batch.inputs), batch, engine.postprocessed).tensors[0].rows)
    np.savez_compressed(DEVICE / "reference_text.npz", embeddings=np.stack(embeddings))
    carry_classifier(texts, fp32)


def carry_classifier(texts: int, fp32: bool) -> None:
    """A small text classifier through `models import`: a BertForSequenceClassification built here
    from a seeded transformers config (no hub), imported, carried as FP16 TorchScript with ONNX
    Runtime FP32 logits. No model.onnx: the GPU image has no TensorRT (bench/gpu_image.txt), and its
    2 MB put the first carry over the device tool's limit."""

    import tempfile

    from bench.gpu_parity import BYO_CLASSIFIER, token_ids
    from gpu_consumer.batcher import make_batch
    from gpu_consumer.onnxruntime_engine import OnnxRuntimeEngine
    from model_repository.importer import import_model
    from tests.support.byo_models import save_classifier

    with tempfile.TemporaryDirectory() as scratch:
        # uncalibrated: the calibrated head of a random BERT magnifies FP16 rounding past any real model's
        folder = save_classifier(Path(scratch) / "classifier", calibrated=False, hidden_size=16)
        config = import_model(Path(scratch) / "models", folder, BYO_CLASSIFIER)
        carry_model(config, fp32)
        engine = OnnxRuntimeEngine(config)
        ids = token_ids(config, texts)
        logits = [engine.infer(make_batch(config, ids[s : s + 32]).inputs)["logits"] for s in range(0, len(ids), 32)]
    np.savez_compressed(DEVICE / "reference_classifier.npz", logits=np.concatenate(logits))
    print(f"carried {BYO_CLASSIFIER} ({config.task}, {config.source}) for the torch parity check")


def image_part(repository: Path, fp32: bool) -> None:
    from gpu_consumer.batcher import make_batch
    from gpu_consumer.onnxruntime_engine import OnnxRuntimeEngine
    from jobs.launch.runner import ensure_model
    from preprocess_app.image import decode_image
    from tests.support.image_corpus import real_photos

    config = ensure_model(repository, "efficientnet-lite0", print)
    assert config.image is not None
    carry_model(config, fp32)
    photos = real_photos()
    crops = [decode_image(p.read_bytes(), config.image) for p in photos]
    logits = OnnxRuntimeEngine(config).infer(make_batch(config, crops).inputs)["logits"]
    np.savez_compressed(
        DEVICE / "reference_images.npz", crops=np.stack(crops), logits=logits, names=np.array([p.name for p in photos])
    )


def dry_run_only() -> list[Path]:
    """What --fp32 added to .device/: the FP32 TorchScript files, which the device carry never holds."""
    return sorted((DEVICE / "models").rglob(TORCHSCRIPT_FILE))


def tracked_bytes() -> int:
    """What the device tool sends besides the carry: tracked and untracked-not-ignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return sum(f.stat().st_size for name in listed.split(b"\0") if name and (f := ROOT / name.decode()).is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["text", "images"])
    parser.add_argument("--model-repository", type=Path, default=ROOT / "models")
    parser.add_argument("--texts", type=int, default=512, help="reference embeddings to carry (text part)")
    parser.add_argument(
        "--fp32",
        action="store_true",
        help="also carry the FP32 TorchScript, for the CPU dry run only (bench/gpu_dryrun.sh): never send it",
    )
    args = parser.parse_args()
    shutil.rmtree(DEVICE, ignore_errors=True)
    DEVICE.mkdir()
    carry_wheels()
    if args.part == "text":
        text_part(args.model_repository, args.texts, args.fp32)
    else:
        image_part(args.model_repository, args.fp32)
    extra = dry_run_only()
    extra_size = sum(f.stat().st_size for f in extra)
    size = sum(f.stat().st_size for f in DEVICE.rglob("*") if f.is_file()) - extra_size
    total = size + tracked_bytes()
    if extra:
        print(
            f".device/ also holds {extra_size / 2**20:.1f} MiB of FP32 TorchScript for the CPU dry run "
            f"({len(extra)} file{'s' if len(extra) > 1 else ''}, not counted below): "
            "do not send this .device/ to the device tool"
        )
    print(
        f".device/ holds {size / 2**20:.1f} MiB for the {args.part} part; with the working tree "
        f"{total / 2**20:.1f} of the device tool's {TOOL_LIMIT / 2**20:.0f} MiB"
    )
    if total > TOOL_LIMIT - MARGIN:
        raise SystemExit(f"the carry is over {(TOOL_LIMIT - MARGIN) / 2**20:.0f} MiB: the device tool would refuse it")


if __name__ == "__main__":
    main()
