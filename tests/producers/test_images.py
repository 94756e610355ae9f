from __future__ import annotations

from pathlib import Path

from jobs.submit import JobInput, detect_kind
from producers import InputError
from producers.images import ImageRecord, read_image_folder, read_image_jsonl


def test_a_folder_is_read_recursively_by_extension_with_relative_ids(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("b.jpg", "a.PNG", "sub/c.gif", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    items = list(read_image_folder(tmp_path))
    assert [i.record_id for i in items if isinstance(i, ImageRecord)] == ["a.PNG", "b.jpg", "sub/c.gif"]
    assert detect_kind(tmp_path) == "image"


def test_an_image_over_the_record_limit_is_refused_naming_its_path(tmp_path: Path) -> None:
    (tmp_path / "big.jpg").write_bytes(b"x" * 2000)
    (tmp_path / "ok.jpg").write_bytes(b"x" * 10)
    source = JobInput.open(str(tmp_path), max_image_bytes=1000)
    valid, errors = source.validate()
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
