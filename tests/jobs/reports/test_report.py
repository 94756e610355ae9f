"""`nearline report` renders in a real browser: headless Chromium (Debian's package) draws the plots."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
from PIL import Image

from jobs.reports.report import BATCH_COLOR, INFERRED_COLOR, LATENCY_COLOR, PREPROCESSED_COLOR
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import TinyModel


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "headless Chromium is missing: bash .ci/setup installs Debian's chromium package"
    return subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",  # root in CI
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--no-first-run",
            "--hide-scrollbars",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def pixels_of(image: np.ndarray, color: str) -> int:
    rgb = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.uint8)
    return int(np.all(image[:, :, :3] == rgb, axis=2).sum())


def test_the_report_is_one_self_contained_page_whose_plots_a_browser_draws(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "8", "--max-linger-ms", "20")
    done = pipeline.cli(
        "submit", str(write_jsonl(tmp_path / "in.jsonl", example_lines(300))), "--model", "tiny", "--wait"
    )
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()

    page = tmp_path / "report.html"
    made = pipeline.cli("report", job_id, "-o", str(page))
    assert made.returncode == 0, made.stderr
    html = page.read_text(encoding="utf-8")
    assert re.search(r"\b(src|href)\s*=", html) is None  # nothing to fetch: one file is the whole report

    dom = chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr
    plots = re.findall(r'data-plot="([^"]+)"', dom.stdout)
    assert plots == [
        "throughput",
        "latency-wait-for-preprocess",
        "latency-preprocess",
        "latency-wait-for-inference",
        "latency-batching",
        "latency-inference",
        "latency-postprocess",
        "latency-end-to-end",
        "batch-sizes",
    ]
    # The batch-size bars, read back from the page, account for every record once.
    batch_svg = dom.stdout[dom.stdout.index('data-plot="batch-sizes"') :]
    bars = [(int(size), int(n)) for size, n in re.findall(r"<title>(\d+): (\d+)</title>", batch_svg)]
    assert bars and max(size for size, _ in bars) <= 8
    assert sum(size * n for size, n in bars) == 300
    assert f"<td>{300:,}</td>" in dom.stdout  # the submitted count

    shot = tmp_path / "report.png"
    drawn = chromium("--window-size=1500,2400", f"--screenshot={shot}", page.as_uri())
    assert drawn.returncode == 0 and shot.exists(), drawn.stderr
    image = np.asarray(Image.open(shot).convert("RGB"))
    # Every chart put its colour on screen: bars are solid fills, so their exact colour survives.
    assert pixels_of(image, INFERRED_COLOR) > 2000
    assert pixels_of(image, PREPROCESSED_COLOR) > 100
    assert pixels_of(image, LATENCY_COLOR) > 5000
    assert pixels_of(image, BATCH_COLOR) > 2000
