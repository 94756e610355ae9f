"""JSON Lines requests for causal LMs (producers/jsonl.py): {"id", "prompt"} or {"id", "messages"}
with optional "params", one record each, checked at their line."""

from __future__ import annotations

import json
from pathlib import Path

from producers import InputError, InputRecord, read_text_input
from schemas.generation_request import REQUEST_ATTRIBUTE, parse_request


def test_prompt_and_chat_lines_become_requests_and_bad_ones_errors_at_their_line(tmp_path: Path) -> None:
    lines = [
        {"id": "a", "prompt": "Write a haiku.", "params": {"max_tokens": 20, "stop": "\n\n"}},
        {"id": "b", "messages": [{"role": "user", "content": "Hi"}], "attributes": {"team": "x"}},
        {"id": "c", "prompt": ""},
        {"id": "d", "messages": [{"role": "robot", "content": "x"}]},
        {"id": "e", "prompt": "x", "params": {"logprobs": 2}},
        {"id": "f", "prompt": "x", "messages": []},
        {"id": "g", "text": "an ordinary text"},
    ]
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    read = list(read_text_input(path))
    records = {r.record_id: r for r in read if isinstance(r, InputRecord)}
    errors = {e.line: e.reason for e in read if isinstance(e, InputError)}
    assert sorted(records) == ["a", "b", "g"]
    a, b = parse_request(records["a"].text), parse_request(records["b"].text)
    assert (a.prompt, a.params) == ("Write a haiku.", {"max_tokens": 20, "stop": ["\n\n"]})
    assert b.messages == (("user", "Hi"),)
    assert records["b"].attributes == {"team": '"x"', REQUEST_ATTRIBUTE: "true"}
    assert REQUEST_ATTRIBUTE not in records["g"].attributes and records["g"].text == "an ordinary text"
    assert errors[3] == '"prompt" must be a non-empty string, got ""'
    assert errors[4] == '"messages"[0].role must be one of system, user, assistant, got "robot"'
    assert errors[5].startswith('"params" has logprobs, which is not taken')
    assert errors[6] == 'a request has "prompt" or "messages", not both'
