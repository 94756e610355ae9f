from __future__ import annotations

from pathlib import Path

from producers import InputError, InputRecord, read_text_input
from producers.images import ImageRecord, read_image_jsonl


def write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_jsonl_ids_default_to_line_numbers_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = write(tmp_path, "in.jsonl", b'{"text": "first"}\n\n{"id": "x", "text": "second", "attributes": {"a": 1}}\n')
    items = list(read_text_input(path))
    assert items == [
        InputRecord("1", "first", 1),
        InputRecord("x", "second", 3, {"a": "1"}),
    ]


def test_jsonl_problems_are_pinned_to_file_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "bad.jsonl",
        b'{"id": 1, "text": "ok"}\n'
        b'{"id": 2, "text": "unterminated\n'
        b'{"id": 3}\n'
        b'{"id": 4, "text": "   "}\n'
        b'{"id": 5, "text": "caf\xe9"}\n'
        b'{"id": 6, "text": 42}\n'
        b'["not", "an", "object"]\n'
        b'{"id": 1, "text": "again"}\n'
        b'{"id": 9, "text": "fine"}\n',
    )
    items = list(read_text_input(path))
    errors = [str(i) for i in items if isinstance(i, InputError)]
    assert [r.record_id for r in items if isinstance(r, InputRecord)] == ["1", "9"]
    assert errors == [
        f"{path}:2: invalid JSON: Unterminated string starting at (column 19)",
        f'{path}:3: missing "text"',
        f"{path}:4: text is empty",
        f"{path}:5: not valid UTF-8 (byte 0xe9 at column 23)",
        f'{path}:6: "text" must be a string, got number',
        f"{path}:7: expected a JSON object, got list",
        f"{path}:8: duplicate id '1' (first on line 1)",
    ]


def test_a_byte_order_mark_opening_a_file_is_not_part_of_its_first_record(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    jsonl = write(tmp_path, "in.jsonl", bom + b'{"text": "first"}\r\n{"text": "\xef\xbb\xbfsecond"}\n')
    assert list(read_text_input(jsonl)) == [InputRecord("1", "first", 1), InputRecord("2", "\ufeffsecond", 2)]
    lines = write(tmp_path, "in.txt", bom + b"first\n")
    assert list(read_text_input(lines)) == [InputRecord("1", "first", 1)]


def test_plain_text_is_one_record_per_non_blank_line(tmp_path: Path) -> None:
    path = write(tmp_path, "in.txt", b"alpha\r\n\nbeta\n\xff\xfe\n")
    items = list(read_text_input(path))
    assert items[:2] == [InputRecord("1", "alpha", 1), InputRecord("3", "beta", 3)]
    assert str(items[2]) == f"{path}:4: not valid UTF-8 (byte 0xff at column 1)"


def test_oversized_text_is_refused_with_its_size(tmp_path: Path) -> None:
    path = write(tmp_path, "big.txt", b"x" * 1_000_001 + b"\n")
    (error,) = list(read_text_input(path))
    assert str(error) == f"{path}:1: text is 1000001 bytes, over the limit of 1000000"


def test_lone_surrogates_from_json_escapes_are_refused_where_they_stand(tmp_path: Path) -> None:
    """JSON may escape half a surrogate pair, which no UTF-8 encoder takes: left in, the record
    would pass validation and stop the submit half way, with a traceback."""
    path = write(
        tmp_path,
        "in.jsonl",
        b'{"id": "ok", "text": "fine"}\n'
        b'{"id": "b\\ud800", "text": "x"}\n'
        b'{"id": "c", "text": "bad \\udc80 text"}\n'
        b'{"id": "d", "text": "t", "attributes": {"k": "\\ud800"}}\n'
        b'{"id": "e", "text": "a pair \\ud83d\\ude00 is fine"}\n',
    )
    items = list(read_text_input(path))
    assert [i.record_id for i in items if isinstance(i, InputRecord)] == ["ok", "e"]
    assert [str(i) for i in items if isinstance(i, InputError)] == [
        f'{path}:2: "id" holds a lone surrogate (U+D800 at position 2), which is not valid Unicode',
        f"{path}:3: text holds a lone surrogate (U+DC80 at position 5), which is not valid Unicode",
        f"""{path}:4: "attributes" hold a lone surrogate (U+D800 at position 1 of '\\ud800'), """
        "which is not valid Unicode",
    ]


def test_image_lines_take_ids_by_the_same_rule_as_text_lines(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"x")
    path = write(
        tmp_path,
        "images.jsonl",
        b'{"id": {"nested": 1}, "image": "a.jpg"}\n'
        b'{"id": "", "image": "a.jpg"}\n'
        b'{"id": "x", "image": "a\\ud800.jpg"}\n'
        b'{"id": 7, "image": "a.jpg"}\n',
    )
    items = list(read_image_jsonl(path))
    assert [str(i) for i in items if isinstance(i, InputError)] == [
        f'{path}:1: "id" must be a non-empty string or an integer, got {{"nested": 1}}',
        f'{path}:2: "id" must be a non-empty string or an integer, got ""',
        f'{path}:3: "image" holds a lone surrogate (U+D800 at position 2), which is not valid Unicode',
    ]
    assert [i.record_id for i in items if isinstance(i, ImageRecord)] == ["7"]
