"""OpenAI batch request files read as records: a record per input string, its request in its
attributes, and a file:line error for every request that cannot run."""

from __future__ import annotations

import json
from pathlib import Path

from producers import InputError, InputRecord, is_openai_batch_file, read_text_input
from producers.openai_batch import batch_model, read_openai_batch


def request(custom_id: object, texts: object, **extra: object) -> dict[str, object]:
    line = {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {"model": "minilm", "input": texts},
    }
    line.update(extra)
    return line


def write(path: Path, *lines: object) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_each_input_string_is_a_record_named_by_its_request(tmp_path: Path) -> None:
    path = write(tmp_path / "b.jsonl", request("a", "one"), "", request("b", ["two", "three"]))
    records = list(read_openai_batch(path))
    assert records == [
        InputRecord("a", "one", 1, {"openai.custom_id": '"a"', "openai.index": "0", "openai.inputs": "1"}),
        InputRecord("b[0]", "two", 3, {"openai.custom_id": '"b"', "openai.index": "0", "openai.inputs": "2"}),
        InputRecord("b[1]", "three", 3, {"openai.custom_id": '"b"', "openai.index": "1", "openai.inputs": "2"}),
    ]
    assert batch_model(path) == "minilm"


def test_auto_format_tells_a_batch_file_from_json_lines_by_its_first_object(tmp_path: Path) -> None:
    batch = write(tmp_path / "b.jsonl", request("a", "one"))
    plain = write(tmp_path / "p.jsonl", {"id": "a", "text": "one"})
    assert is_openai_batch_file(batch) and not is_openai_batch_file(plain)
    assert [r.record_id for r in read_text_input(batch) if isinstance(r, InputRecord)] == ["a"]
    assert [r.text for r in read_text_input(plain) if isinstance(r, InputRecord)] == ["one"]


def test_every_request_that_cannot_run_is_an_error_at_its_line_and_the_others_are_read(tmp_path: Path) -> None:
    other_model = request("g", "x")
    other_model["body"] = {"model": "other", "input": "x"}
    path = write(
        tmp_path / "b.jsonl",
        request("a", "fine"),
        request("a", "again"),
        request("b", "x", url="/v1/chat/completions"),
        {"custom_id": "c", "url": "/v1/embeddings", "body": {"model": "minilm"}},
        request(7, "x"),
        request("e", [1, 2, 3]),
        request("f", []),
        other_model,
        request("h", "   "),
        "not json",
        request("i", "x", method="GET"),
        request("ok", ["also", "fine"]),
        {**request("j", "x"), "body": {"model": "minilm", "input": "x", "encoding_format": "base64"}},
        {**request("k", "x"), "body": {"model": "minilm", "input": "x", "dimensions": 8}},
    )
    read = list(read_openai_batch(path))
    errors = {e.line: e.reason for e in read if isinstance(e, InputError)}
    assert [r.record_id for r in read if isinstance(r, InputRecord)] == ["a", "ok[0]", "ok[1]"]
    assert errors[2] == "duplicate custom_id 'a' (first on line 1)"
    assert errors[3].startswith('request b: "input" is not supported')  # a chat request's body has messages
    assert errors[4] == 'request c: its body has no "input"'
    assert errors[5] == '"custom_id" must be a non-empty string, got 7'
    assert "token arrays are not taken" in errors[6]
    assert errors[7] == 'request f: "input" is an empty list'
    assert "one job runs one model" in errors[8] and "line 1 asks for 'minilm'" in errors[8]
    assert errors[9] == "request h: text is empty"
    assert errors[10].startswith("invalid JSON")
    assert errors[11] == 'request i: "method" must be "POST", got "GET"'
    assert errors[13] == 'request j: "encoding_format" "base64" is not taken: embeddings come back as floats'
    assert errors[14] == 'request k: "dimensions" is not taken: a model\'s embedding has its own size'
    assert (
        str(next(e for e in read if isinstance(e, InputError)))
        == f"{path}:2: duplicate custom_id 'a' (first on line 1)"
    )


def test_an_input_whose_id_another_request_took_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "b.jsonl", request("x[0]", "taken"), request("x", ["clash", "other"]))
    read = list(read_openai_batch(path))
    assert [r.record_id for r in read if isinstance(r, InputRecord)] == ["x[0]"]
    assert [e.reason for e in read if isinstance(e, InputError)] == [
        "its input 'x[0]' has the id of the request on line 1"
    ]
