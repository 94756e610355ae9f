"""`nearline submit` on the real broker with inputs that are not what they claim: nothing is read
without bound, nothing blocks, and every refusal names the path and line (#12)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kafka_io.reading import read_topics
from kafka_io.topics import TopicSpec, ensure_topics
from tests.support.pipeline import RunningPipeline


def raw_image_keys(pipeline: RunningPipeline) -> list[bytes]:
    ensure_topics(pipeline.settings, [TopicSpec(pipeline.topics.raw_image)])  # an empty topic reads as empty
    return sorted(m.key or b"" for m in read_topics(pipeline.settings, [pipeline.topics.raw_image]))


@pytest.mark.timeout(120)
def test_submit_refuses_devices_folders_and_fifos_in_an_image_listing_and_produces_nothing(
    pipeline: RunningPipeline, tmp_path: Path
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
    pipeline: RunningPipeline, tmp_path: Path
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


def hostile_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Inputs that cannot be a job as a whole, with the key words of their refusal."""
    import bz2
    import gzip

    corpus: dict[str, tuple[Path, str]] = {}
    gz = tmp_path / "in.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"text": "hello"}\n'))
    corpus["gzip"] = (
        gz,
        f"{gz}: is gzip-compressed; nearline reads uncompressed input: decompress it first (gzip -dk {gz})",
    )
    bz = tmp_path / "in.txt.bz2"
    bz.write_bytes(bz2.compress(b"hello\n"))
    corpus["bzip2"] = (
        bz,
        f"{bz}: is bzip2-compressed; nearline reads uncompressed input: decompress it first (bzip2 -dk",
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    corpus["empty"] = empty, f"{empty} holds no records: nothing was submitted"
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n")
    corpus["blank lines"] = blank, f"{blank} holds no records: nothing was submitted"
    folder = tmp_path / "no-images"
    folder.mkdir()
    (folder / "notes.txt").write_text("x")
    corpus["folder without images"] = folder, f"{folder} holds no images: nothing was submitted"
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    corpus["fifo"] = fifo, f"{fifo}: is a FIFO, not a regular file: nothing was submitted (a job reads its input twice"
    return corpus


@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", ["submit", "produce", "run"])
def test_an_input_that_cannot_be_a_job_is_refused_by_name_with_or_without_skip_invalid(
    pipeline: RunningPipeline, tmp_path: Path, command: str
) -> None:
    """A .gz was a screen of 'not valid UTF-8' lines (and with --skip-invalid an empty 'completed
    0/0' job), an empty input a 0-record job, and a FIFO was told to 'pass --skip-invalid'."""
    from jobs.registry import load_jobs

    for name, (path, message) in hostile_inputs(tmp_path).items():
        for extra in ((), ("--skip-invalid",)):
            topic = [pipeline.topics.raw_image if path.is_dir() else pipeline.topics.raw_text]
            args = [command, *(topic if command == "produce" else []), str(path), "--model", "tiny", *extra]
            done = pipeline.cli(*args, "--job-id", f"job-{command}-{name.replace(' ', '-')}")
            assert done.returncode == 2, (name, done.stderr)
            assert message in done.stderr, (name, done.stderr)
            assert "--skip-invalid" not in done.stderr and "not valid UTF-8" not in done.stderr, done.stderr
    assert not [j for j in load_jobs(pipeline.settings, pipeline.topics) if j.startswith(f"job-{command}-")]


def test_compressed_stdin_and_an_input_of_only_invalid_records_are_refused_by_name(
    pipeline: RunningPipeline, tmp_path: Path
) -> None:
    import gzip
    import subprocess
    import sys

    piped = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "submit", "-", "--model", "tiny"],
        env=pipeline.env(),
        input=gzip.compress(b"hello\n"),  # bytes: RunningPipeline.cli takes text
        capture_output=True,
        timeout=120,
    )
    stderr = piped.stderr.decode()
    assert piped.returncode == 2, stderr
    assert "<stdin>: is gzip-compressed; nearline reads uncompressed input: decompress it first" in stderr

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n{"text": 5}\n')
    done = pipeline.cli("submit", str(bad), "--model", "tiny", "--skip-invalid", "--job-id", "job-all-bad")
    assert done.returncode == 2, done.stderr
    assert f'error: {bad}:1: missing "text"' in done.stderr
    assert f"error: {bad}: none of its records is valid (2 invalid): nothing was submitted" in done.stderr
