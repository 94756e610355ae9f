"""A request whose custom_id is the record id of another request's listed input is refused,
naming that input and its request, not as a duplicate of a custom_id no request has."""

from __future__ import annotations

import json
from pathlib import Path

from producers import InputError, InputRecord
from producers.openai_batch import read_openai_batch


def request(custom_id: str, texts: str | list[str]) -> str:
    body = {"model": "minilm", "input": texts}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings", "body": body})


def test_a_custom_id_that_another_requests_input_holds_names_that_input(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    lines = [request("a", ["x", "y"]), request("a[0]", "clash"), request("a[1]", ["also"]), request("a", "again")]
    path.write_text("\n".join(lines) + "\n")
    read = list(read_openai_batch(path))
    assert [r.record_id for r in read if isinstance(r, InputRecord)] == ["a[0]", "a[1]"]
    assert [(e.line, e.reason) for e in read if isinstance(e, InputError)] == [
        (2, "custom_id 'a[0]' is the id of input 0 of request 'a' (line 1); rename one of them"),
        (3, "custom_id 'a[1]' is the id of input 1 of request 'a' (line 1); rename one of them"),
        (4, "duplicate custom_id 'a' (first on line 1)"),
    ]
