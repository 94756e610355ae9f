"""Images end to end: real photos against torch, the bad-image corpus, and text beside images."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from jobs.launch.runner import WaitRules, watch_job
from model_repository.config import ModelConfig
from tests.support.image_corpus import bad_and_odd_images, real_photos
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline, run_embedded, submit
from tests.support.references import torch_top5
from tests.support.tiny_model import TinyModel


@pytest.mark.real_model
@pytest.mark.timeout(600)
def test_run_classifies_real_photos_like_torch_on_the_same_decoded_image(tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in real_photos():
        shutil.copy2(p, photos / f"{p.parent.name}-{p.name}")
    paths = sorted(photos.iterdir())
    # what is not an image by name is left out, and said so; a hidden file is not worth a word
    for name in ("notes.txt", "IMG_1.HEIC", "IMG_2.heic", ".DS_Store"):
        (photos / name).write_bytes(b"not read")
    out = tmp_path / "out.jsonl"
    done = run_embedded(str(photos), "--model", "efficientnet-lite0", "-o", str(out), repository=tmp_path / "models")
    assert done.returncode == 0, done.stderr
    assert f"note: left out 3 files of {photos} that are not images by name (2 .heic, 1 .txt; first" in done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == [p.name for p in paths]
    for line, (indices, scores) in zip(lines, torch_top5(paths), strict=True):
        got = line["labels"]
        assert len(got) == 5
        assert got[0]["index"] == indices[0], line["id"]
        assert [g["index"] for g in got] == indices, line["id"]
        np.testing.assert_allclose([g["score"] for g in got], scores, atol=1e-3)
        assert all(isinstance(g["label"], str) and g["label"] for g in got)


def test_the_bad_image_corpus_gives_results_or_specific_dead_letters_and_no_worker_dies(
    pipeline: RunningPipeline, efficientnet: ModelConfig, tmp_path: Path
) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name, data in bad_and_odd_images().items():
        (folder / name).write_bytes(data)
    for p in real_photos()[:4]:
        shutil.copy2(p, folder / p.name)
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "efficientnet-lite0")
    job_id = submit(pipeline, folder, model="efficientnet-lite0")
    total = len(list(folder.iterdir()))
    outcome, _ = watch_job(
        pipeline.settings, pipeline.topics, job_id, total, WaitRules(check=pipeline.check_workers, timeout_s=180)
    )
    dead = {rid: (d.error_type, d.error) for rid, d in outcome.dead.items()}
    assert set(dead) == {"truncated.jpg", "zero.jpg", "text.jpg", "bomb.png", "jpeg2000.tiff", "cut.webp"}
    assert dead["truncated.jpg"][0] == "CorruptImageError"
    assert dead["zero.jpg"][0] == "EmptyImageError"
    assert dead["text.jpg"][0] == "NotAnImageError"
    assert dead["bomb.png"][0] == "ImageTooLargeError" and "30000x30000" in dead["bomb.png"][1]
    assert str(folder / "bomb.png") in dead["bomb.png"][1]  # the reason names the file
    assert dead["jpeg2000.tiff"][0] == "UnsupportedImageError" and "34712 (JPEG 2000)" in dead["jpeg2000.tiff"][1]
    assert dead["cut.webp"][0] == "CorruptImageError"
    good = {"cmyk.jpg", "grey16.png", "palette-transparent.png", "animated.gif", "exif-rotated.jpg", "good.jpg"}
    good |= {"lossy.webp", "lossless-alpha.webp", "lzw.tiff", "deflate-alpha.tif", "jpeg.tiff"}
    assert set(outcome.results) == good | {p.name for p in real_photos()[:4]}
    for w in pipeline.workers:
        assert w.process.poll() is None


def test_a_text_job_and_an_image_job_run_at_the_same_time_on_one_broker(
    pipeline: RunningPipeline, tiny: TinyModel, efficientnet: ModelConfig, tmp_path: Path
) -> None:
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu-text", "gpu", "--model", "tiny")
    pipeline.start("gpu-image", "gpu", "--model", "efficientnet-lite0")
    texts = write_jsonl(tmp_path / "texts.jsonl", example_lines(300))
    photos = tmp_path / "photos"
    photos.mkdir()
    for i, p in enumerate(real_photos() * 2):
        shutil.copy2(p, photos / f"{i:03d}-{p.name}")
    n_photos = len(list(photos.iterdir()))
    jobs: dict[str, str] = {}
    submitters = [
        threading.Thread(target=lambda: jobs.__setitem__("text", submit(pipeline, texts))),
        threading.Thread(
            target=lambda: jobs.__setitem__("image", submit(pipeline, photos, model="efficientnet-lite0"))
        ),
    ]
    for t in submitters:
        t.start()
    for t in submitters:
        t.join()
    text, _ = watch_job(
        pipeline.settings, pipeline.topics, jobs["text"], 300, WaitRules(check=pipeline.check_workers, timeout_s=180)
    )
    image, _ = watch_job(
        pipeline.settings,
        pipeline.topics,
        jobs["image"],
        n_photos,
        WaitRules(check=pipeline.check_workers, timeout_s=180),
    )
    assert len(text.results) == 300 and not text.dead
    assert len(image.results) == n_photos and not image.dead
    assert {r.model for r in text.results.values()} == {"tiny"}
    assert {r.model for r in image.results.values()} == {"efficientnet-lite0"}
