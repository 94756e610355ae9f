from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.job_input import JobInput
from producers import InputError
from producers.images import (
    ImageFileError,
    ImageRecord,
    left_out_files,
    printable,
    read_image_file,
    read_image_folder,
    read_image_jsonl,
)
from producers.sniffing import detect_kind


def test_a_folder_is_read_recursively_by_extension_with_relative_ids(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("b.jpg", "a.PNG", "sub/c.gif", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    items = list(read_image_folder(tmp_path))
    assert [i.record_id for i in items if isinstance(i, ImageRecord)] == ["a.PNG", "b.jpg", "sub/c.gif"]
    assert detect_kind(tmp_path) == "image"
    assert JobInput.open(str(tmp_path)).left_out() == [tmp_path / "notes.txt"]


def test_what_a_folder_leaves_out_by_name_is_listed_but_hidden_files_are_not(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    for name in ("a.jpg", "raw/b.HEIC", "raw/c.avif", "README", ".DS_Store", "raw/.thumb.db"):
        (tmp_path / name).write_bytes(b"x")
    assert left_out_files(tmp_path) == [tmp_path / "README", tmp_path / "raw/b.HEIC", tmp_path / "raw/c.avif"]
    assert left_out_files(tmp_path / "a.jpg") == []  # a single image leaves nothing out
    text = tmp_path / "lines.txt"
    text.write_text("hello\n")
    assert JobInput.open(str(text)).left_out() == []  # only image folders leave files out


def test_an_image_over_the_record_limit_is_refused_naming_its_path(tmp_path: Path) -> None:
    (tmp_path / "big.jpg").write_bytes(b"x" * 2000)
    (tmp_path / "ok.jpg").write_bytes(b"x" * 10)
    source = JobInput.open(str(tmp_path), max_image_bytes=1000)
    valid, errors = source.validate_keeping(0)[:2]
    assert valid == 1
    assert [str(e) for e in errors] == [
        f"{tmp_path / 'big.jpg'}: image {tmp_path / 'big.jpg'} is 2000 bytes, over the record limit of 1000"
    ]


def test_jsonl_of_image_paths_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "cat.jpg").write_bytes(b"jpeg")
    listing = tmp_path / "images.jsonl"
    listing.write_text('{"id": "c", "image": "cat.jpg"}\n{"id": "d", "image": "missing.jpg"}\n{"text": "no image"}\n')
    items = list(read_image_jsonl(listing))
    assert items[0] == ImageRecord("c", tmp_path / "cat.jpg", 1)
    assert isinstance(items[1], InputError) and str(items[1]).startswith(f"{listing}:2: cannot read image")
    assert str(items[2]) == f'{listing}:3: expected {{"image": "<path>"}}'
    assert detect_kind(listing) == "image"


@pytest.mark.timeout(20)  # a FIFO that blocked the reader would hang here, not fail
def test_jsonl_paths_that_are_not_regular_files_are_refused_naming_path_and_line(tmp_path: Path) -> None:
    (tmp_path / "ok.jpg").write_bytes(b"jpeg")
    (tmp_path / "a-folder.jpg").mkdir()
    os.mkfifo(tmp_path / "pipe.jpg")  # no writer: opening it for a plain read would block forever
    listing = tmp_path / "images.jsonl"
    lines = [
        {"id": "zero", "image": "/dev/zero"},
        {"id": "dir", "image": "a-folder.jpg"},
        {"id": "fifo", "image": "pipe.jpg"},
        {"id": "ok", "image": "ok.jpg"},
    ]
    listing.write_text("".join(json.dumps(line) + "\n" for line in lines))
    items = [str(i) if isinstance(i, InputError) else i for i in read_image_jsonl(listing)]
    assert items == [
        f"{listing}:1: image /dev/zero is a character device, not a regular file",
        f"{listing}:2: image {tmp_path / 'a-folder.jpg'} is a folder, not a regular file",
        f"{listing}:3: image {tmp_path / 'pipe.jpg'} is a FIFO, not a regular file",
        ImageRecord("ok", tmp_path / "ok.jpg", 4),
    ]


@pytest.mark.timeout(20)
def test_reading_an_image_is_bounded_by_the_cap_whatever_the_file_turned_into(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.jpg")
    for path, reason in (
        (Path("/dev/zero"), "is a character device"),
        (tmp_path / "pipe.jpg", "is a FIFO"),
        (tmp_path, "is a folder"),
        (tmp_path / "gone.jpg", "cannot read image"),
    ):
        with pytest.raises(ImageFileError, match=reason):
            read_image_file(path, 100)
    (tmp_path / "ok.jpg").write_bytes(b"x" * 100)
    assert read_image_file(tmp_path / "ok.jpg", 100) == b"x" * 100


def test_an_image_that_changed_after_validation_is_reported_not_read_or_dropped_silently(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"x" * 10)
    (tmp_path / "b.jpg").write_bytes(b"y" * 10)
    source = JobInput.open(str(tmp_path), max_image_bytes=100)
    assert source.validate_keeping(0)[:2] == (2, [])
    (tmp_path / "b.jpg").write_bytes(b"y" * 1000)  # grew past the cap between validation and produce
    late: list[InputError] = []
    records = list(source.out_records("job-1", "tiny", "raw.image", late))
    assert [r.key for r in records] == [b"job-1/a.jpg"]
    assert [str(e) for e in late] == [
        f"{tmp_path / 'b.jpg'}: image {tmp_path / 'b.jpg'} is 1000 bytes, over the record limit of 100"
    ]


def test_a_folder_input_does_not_follow_symlinks_out_of_it_unless_asked(tmp_path: Path) -> None:
    outside, folder = tmp_path / "outside", tmp_path / "in"
    (outside / "more").mkdir(parents=True)
    (outside / "secret.jpg").write_bytes(b"s")
    (outside / "more" / "m.jpg").write_bytes(b"m")
    folder.mkdir()
    (folder / "a.jpg").write_bytes(b"a")
    (folder / "same.jpg").symlink_to(folder / "a.jpg")  # inside the folder: fine
    (folder / "out.jpg").symlink_to(outside / "secret.jpg")
    (folder / "linked").symlink_to(outside / "more")
    (folder / "loop").symlink_to(folder)  # followed links must not recurse forever
    items = list(read_image_folder(folder))
    assert [i.record_id for i in items if isinstance(i, ImageRecord)] == ["a.jpg", "same.jpg"]
    assert sorted(str(i) for i in items if isinstance(i, InputError)) == [
        f"{folder / 'linked'}: symlink to {outside / 'more'}, outside {folder}: not followed "
        "(pass --follow-symlinks to read it)",
        f"{folder / 'out.jpg'}: symlink to {outside / 'secret.jpg'}, outside {folder}: not followed "
        "(pass --follow-symlinks to read it)",
    ]
    followed = list(read_image_folder(folder, follow_symlinks=True))
    assert [i.record_id for i in followed if isinstance(i, ImageRecord)] == [
        "a.jpg",
        "linked/m.jpg",
        "out.jpg",
        "same.jpg",
    ]
    assert not [i for i in followed if isinstance(i, InputError)]


def test_an_image_input_that_does_not_exist_is_an_error_not_an_empty_job(tmp_path: Path) -> None:
    assert JobInput.open(str(tmp_path / "nope.jpg")).validate_keeping(0)[:2] == (
        0,
        [InputError(str(tmp_path / "nope.jpg"), 0, "no such file")],
    )
    assert [str(e) for e in read_image_folder(tmp_path / "gone")] == [f"{tmp_path / 'gone'}: no such file or folder"]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", ["auto", "text", "image"])
def test_an_input_that_is_a_device_or_fifo_is_refused_before_it_is_opened(tmp_path: Path, kind: str) -> None:
    os.mkfifo(tmp_path / "pipe.jsonl")
    for path, what in ((Path("/dev/zero"), "a character device"), (tmp_path / "pipe.jsonl", "a FIFO")):
        source = JobInput.open(str(path), kind=kind)  # type: ignore[arg-type]
        assert source.validate_keeping(0)[:2] == (0, [InputError(str(path), 0, f"is {what}, not a regular file")])


def test_jsonl_attributes_that_are_not_an_object_are_a_per_line_error(tmp_path: Path) -> None:
    (tmp_path / "cat.jpg").write_bytes(b"jpeg")
    listing = tmp_path / "images.jsonl"
    listing.write_text(
        '{"id": "a", "image": "cat.jpg", "attributes": [1]}\n'
        '{"id": "b", "image": "cat.jpg", "attributes": "x"}\n'
        '{"id": "c", "image": "cat.jpg", "attributes": {"k": 1}}\n'
    )
    items = list(read_image_jsonl(listing))
    assert [str(i) for i in items[:2]] == [
        f'{listing}:1: "attributes" must be an object, got array',
        f'{listing}:2: "attributes" must be an object, got string',
    ]
    assert items[2] == ImageRecord("c", tmp_path / "cat.jpg", 3, {"k": "1"})


def test_hidden_files_and_folders_are_not_part_of_a_folder_input(tmp_path: Path) -> None:
    (tmp_path / ".thumbnails").mkdir()
    for name in ("a.jpg", "._a.jpg", ".thumbnails/t.jpg", ".thumbnails/notes.txt", ".DS_Store"):
        (tmp_path / name).write_bytes(b"x")
    assert [i.record_id for i in read_image_folder(tmp_path) if isinstance(i, ImageRecord)] == ["a.jpg"]
    assert left_out_files(tmp_path) == []


def test_a_file_name_that_is_not_utf8_is_refused_by_name_not_crashed_on(tmp_path: Path) -> None:
    (tmp_path / "ok.jpg").write_bytes(b"x")
    bad = os.fsencode(tmp_path) + b"/img\xffbad.jpg"
    with open(bad, "wb") as f:
        f.write(b"x")
    items = list(read_image_folder(tmp_path))
    assert [i.record_id for i in items if isinstance(i, ImageRecord)] == ["ok.jpg"]
    [error] = [str(i) for i in items if isinstance(i, InputError)]
    assert error == f"{tmp_path}/img\\udcffbad.jpg: the file name b'img\\xffbad.jpg' is not UTF-8: rename the file"


UNREADABLE = """
import sys
from pathlib import Path
from producers.images import read_image_folder
for item in read_image_folder(Path(sys.argv[1])):
    print(item)
"""


@pytest.mark.process
def test_a_subfolder_that_cannot_be_read_is_reported_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "a.jpg").write_bytes(b"x")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "b.jpg").write_bytes(b"x")
    locked.chmod(0)
    # root reads any folder: drop the capabilities that let it, as an ordinary user runs
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-c", UNREADABLE, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).parents[2],
        )
    finally:
        locked.chmod(0o755)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"{locked}: cannot read this folder: Permission denied" in lines
    assert any("ok/a.jpg" in line for line in lines)


def test_a_path_for_a_message_keeps_its_text_and_escapes_what_would_break_a_line() -> None:
    assert printable("photos/été 1.jpg") == "photos/été 1.jpg"
    assert printable("a\nforged: line.txt") == "a\\nforged: line.txt"
    assert printable("\x1b[31mred.txt") == "\\x1b[31mred.txt"
    assert printable("img\udcffbad.jpg") == "img\\udcffbad.jpg"
