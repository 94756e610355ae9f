"""Benchmark: ms per image through preprocess_app.image.decode_image, pillow-simd vs plain Pillow,
with and without JPEG draft mode, on a 4K, a 1080p and a small real-photo JPEG. One run:

    .venv/bin/python -m bench.image_preprocess

Plain Pillow cannot share a venv with pillow-simd (both are the PIL package), so the script keeps
a second venv (.venv-pillow, created on first use) and runs the same measurement in both, each in a
fresh process with the same allocator settings the preprocess worker gets.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jobs.launch.local import PREPROCESS_ENV

ROOT = Path(__file__).parents[1]
# what importing preprocess_app.image needs, pinned as in pyproject.toml, with plain Pillow
PLAIN_PILLOW = [
    "pillow==13.0.0",
    "numpy==2.4.6",
    "fastavro==1.13.1",
    "confluent-kafka==2.16.1",
    "tokenizers==0.22.2",
    "prometheus-client==0.26.0",
]
REPS = {"4K": 15, "1080p": 30, "small": 80}


def make_inputs(folder: Path) -> dict[str, Path]:
    """Real photos re-encoded (baseline JPEG, q90) at exact 4K and 1080p; the small one as shipped."""
    from PIL import Image

    from tests.support.image_corpus import package_dir

    source = Image.open(package_dir("skimage") / "data" / "hubble_deep_field.jpg").convert("RGB")
    small = package_dir("sklearn") / "datasets" / "images" / "china.jpg"
    out = {"small": small}
    for name, size in (("4K", (3840, 2160)), ("1080p", (1920, 1080))):
        path = folder / f"{name}.jpg"
        source.resize(size, Image.Resampling.BICUBIC).save(path, "JPEG", quality=90)
        out[name] = path
    return out


def measure(inputs: dict[str, str]) -> dict[str, dict[str, float]]:
    """Median ms per image, with and without draft, in this interpreter's PIL."""
    from model_repository.config import ImageSpec
    from preprocess_app.image import decode_image

    results: dict[str, dict[str, float]] = {}
    for name, path in inputs.items():
        data = Path(path).read_bytes()
        row = {}
        for draft in (True, False):
            spec = ImageSpec(jpeg_draft=draft)
            decode_image(data, spec)  # warm
            times = []
            for _ in range(REPS[name]):
                t0 = time.perf_counter()
                decode_image(data, spec)
                times.append((time.perf_counter() - t0) * 1000)
            row["draft" if draft else "no_draft"] = statistics.median(times)
        results[name] = row
    return results


def run_in(python: str, inputs: dict[str, Path]) -> dict[str, dict[str, float]]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        **PREPROCESS_ENV,  # the allocator settings the preprocess worker runs with
    }
    args = json.dumps({k: str(v) for k, v in inputs.items()})
    done = subprocess.run(
        [python, "-m", "bench.image_preprocess", "--measure", args], env=env, cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout)


def plain_pillow_python(venv: Path) -> str:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # every time: a venv made before the list grew lacks what was added (a second when satisfied)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PLAIN_PILLOW], check=True)
    return str(python)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--pillow-venv", type=Path, default=ROOT / ".venv-pillow")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return

    import PIL

    from bench.decoupling import machine

    with tempfile.TemporaryDirectory() as tmp:
        inputs = make_inputs(Path(tmp))
        sizes = {}
        for name, path in inputs.items():
            from PIL import Image

            with Image.open(path) as im:
                sizes[name] = f"{im.size[0]}x{im.size[1]}, {path.stat().st_size / 1e6:.2f} MB"
        simd = run_in(sys.executable, inputs)
        plain = run_in(plain_pillow_python(args.pillow_venv), inputs)

    print(f"machine: {machine()}; one thread per image")
    print(f"pillow-simd {PIL.__version__} (this venv) vs Pillow 13.0.0 ({args.pillow_venv})")
    print("decode -> EXIF -> RGB -> resize shorter side 256 (bicubic) -> crop 224 -> uint8 CHW; median ms/image")
    header = f"{'image':<28}{'Pillow':>9}{'Pillow+draft':>14}{'simd':>8}{'simd+draft':>12}{'speed-up':>10}"
    print(header)
    for name in inputs:
        speedup = plain[name]["no_draft"] / simd[name]["draft"]
        print(
            f"{name + ' (' + sizes[name] + ')':<28}{plain[name]['no_draft']:>9.1f}{plain[name]['draft']:>14.1f}"
            f"{simd[name]['no_draft']:>8.1f}{simd[name]['draft']:>12.1f}{speedup:>9.1f}x"
        )
    print("speed-up: plain Pillow without draft / pillow-simd with draft (what the preprocess worker runs)")


if __name__ == "__main__":
    main()
