"""`nearline submit` on the real broker with inputs that are not what they claim: nothing is read
without bound, nothing blocks, and every refusal names the path and line (#12)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kafka_io.reading import read_topics
from kafka_io.topics import TopicSpec, ensure_topics
from tests.jobs.pipeline import Pipeline


def raw_image_keys(pipeline: Pipeline) -> list[bytes]:
    ensure_topics(pipeline.settings, [TopicSpec(pipeline.topics.raw_image)])  # an empty topic reads as empty
    return sorted(m.key or b"" for m in read_topics(pipeline.settings, [pipeline.topics.raw_image]))


@pytest.mark.timeout(120)
def test_submit_refuses_devices_folders_and_fifos_in_an_image_listing_and_produces_nothing(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    (tmp_path / "ok.jpg").write_bytes(b"jpeg")
    (tmp_path / "folder.jpg").mkdir()
    os.mkfifo(tmp_path / "pipe.jpg")
    listing = tmp_path / "images.jsonl"
    rows = [
        {"id": "ok", "image": "ok.jpg"},
        {"id": "zero", "image": "/dev/zero"},  # was read whole: 21 GB and the OOM killer
        {"id": "dir", "image": "folder.jpg"},  # was accepted, then silently not sent
        {"id": "fifo", "image": "pipe.jpg"},  # would block the submit forever
    ]
    listing.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = pipeline.cli("submit", str(listing), "--model", "tiny")
    assert done.returncode == 2, done.stderr
    assert f"error: {listing}:2: image /dev/zero is a character device, not a regular file" in done.stderr
    assert f"error: {listing}:3: image {tmp_path / 'folder.jpg'} is a folder, not a regular file" in done.stderr
    assert f"error: {listing}:4: image {tmp_path / 'pipe.jpg'} is a FIFO, not a regular file" in done.stderr
    assert "nothing was submitted: 3 invalid record(s)" in done.stderr
    assert raw_image_keys(pipeline) == []

    skipped = pipeline.cli("submit", str(listing), "--model", "tiny", "--skip-invalid", "--job-id", "job-ok")
    assert skipped.returncode == 0, skipped.stderr
    assert "submitted 1 record\n" in skipped.stderr
    assert raw_image_keys(pipeline) == [b"job-ok/ok"]


def test_a_folder_input_follows_symlinks_out_of_it_only_with_follow_symlinks(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    folder, outside = tmp_path / "in", tmp_path / "elsewhere"
    folder.mkdir()
    outside.mkdir()
    (folder / "a.jpg").write_bytes(b"a")
    (outside / "private.jpg").write_bytes(b"p")
    (folder / "b.jpg").symlink_to(outside / "private.jpg")

    refused = pipeline.cli("submit", str(folder), "--model", "tiny", "--job-id", "job-no")
    assert refused.returncode == 2, refused.stderr
    assert f"error: {folder / 'b.jpg'}: symlink to {outside / 'private.jpg'}, outside {folder}" in refused.stderr
    assert raw_image_keys(pipeline) == []

    followed = pipeline.cli("submit", str(folder), "--model", "tiny", "--job-id", "job-yes", "--follow-symlinks")
    assert followed.returncode == 0, followed.stderr
    assert raw_image_keys(pipeline) == [b"job-yes/a.jpg", b"job-yes/b.jpg"]
