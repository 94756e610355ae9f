"""OpenAI batch lines for /v1/chat/completions and /v1/completions (producers/openai_batch.py):
one record per request, its text the generation request, its sampling fields checked, and every
field nearline does not run refused at its line, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from producers import InputError, InputRecord, read_text_input
from producers.openai_batch import read_openai_batch
from schemas.generation_request import REQUEST_ATTRIBUTE, parse_request


def line(custom_id: str, url: str, **body: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {"model": "smollm2-135m", **body}}


CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def write(path: Path, *lines: dict[str, Any] | str) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_chat_and_completion_requests_are_one_record_each_with_their_sampling(tmp_path: Path) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
    ]
    path = write(
        tmp_path / "b.jsonl",
        line("c1", CHAT, messages=messages, max_completion_tokens=16, stop="\n"),
        line("p1", COMPLETIONS, prompt="Once upon a time", max_tokens=8, temperature=0, seed=3),
    )
    records = [r for r in read_text_input(path) if isinstance(r, InputRecord)]
    assert [r.record_id for r in records] == ["c1", "p1"]
    chat, prompt = (parse_request(r.text) for r in records)
    assert chat.messages == (("system", "Be brief."), ("user", "Hi"))
    assert chat.params == {"max_tokens": 16, "stop": ["\n"]}
    assert prompt.prompt == "Once upon a time"
    assert prompt.params == {"max_tokens": 8, "temperature": 0.0, "seed": 3}
    assert records[0].attributes["openai.url"] == json.dumps(CHAT)
    assert records[1].attributes["openai.custom_id"] == '"p1"'
    assert all(r.attributes[REQUEST_ATTRIBUTE] == "true" for r in records)


def test_every_generation_request_that_cannot_run_is_refused_at_its_line(tmp_path: Path) -> None:
    user = [{"role": "user", "content": "Hi"}]
    path = write(
        tmp_path / "b.jsonl",
        line("ok", CHAT, messages=user),
        line("tools", CHAT, messages=user, tools=[{"type": "function"}]),
        line("format", CHAT, messages=user, response_format={"type": "json_object"}),
        line("logprobs", CHAT, messages=user, logprobs=True),
        line("n", CHAT, messages=user, n=2),
        line("role", CHAT, messages=[{"role": "tool", "content": "x"}]),
        line("empty", CHAT, messages=[]),
        line("temp", CHAT, messages=user, temperature=-0.5),
        line("stops", COMPLETIONS, prompt="x", stop=["a", "b", "c", "d", "e"]),
        line("list", COMPLETIONS, prompt=["a", "b"]),
        line("both", COMPLETIONS, prompt="x", max_tokens=3, max_completion_tokens=4),
        line("zero", COMPLETIONS, prompt="x", max_tokens=0),
        line("image", CHAT, messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
        line("wrong", COMPLETIONS, messages=user),
        line("ok2", COMPLETIONS, prompt="fine"),
    )
    read = list(read_openai_batch(path))
    errors = {e.line: e.reason for e in read if isinstance(e, InputError)}
    assert [r.record_id for r in read if isinstance(r, InputRecord)] == ["ok", "ok2"]
    assert errors[2].startswith('request tools: "tools" is not supported')
    assert errors[3].startswith('request format: "response_format" is not supported')
    assert errors[4].startswith('request logprobs: "logprobs" is not supported')
    assert errors[5] == 'request n: "n" must be 1 (one completion per request), got 2'
    assert errors[6] == 'request role: "messages"[0].role must be one of system, user, assistant, got "tool"'
    assert errors[7] == 'request empty: "messages" must be a non-empty list, got []'
    assert errors[8] == 'request temp: "temperature" must be between 0 and 2, got -0.5'
    assert errors[9] == 'request stops: "stop" names 5 strings; at most 4 are taken'
    assert errors[10].startswith('request list: "prompt" must be one string')
    assert errors[11] == 'request both: give "max_tokens" or "max_completion_tokens", not both'
    assert errors[12] == 'request zero: "max_tokens" must be an integer of at least 1, got 0'
    assert errors[13].startswith('request image: "messages"[0].content[0] must be a text part')
    assert errors[14] == 'request wrong: "messages" is for /v1/chat/completions; a completion request has "prompt"'
