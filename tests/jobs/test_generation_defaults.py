"""A job's request defaults (--max-tokens, --temperature, --system-prompt; jobs/job_input.py,
schemas/generation_request.py): plain texts become requests, a request's own params win."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.job_input import JobInput
from producers import InputError, InputRecord
from producers.table_rows import Columns
from schemas.generation_request import REQUEST_ATTRIBUTE, RequestDefaults, RequestError, parse_request


def test_plain_texts_and_requests_take_the_job_defaults_their_own_params_first(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [
        {"id": "plain", "text": "Name a river."},
        {"id": "own", "prompt": "Count to three.", "params": {"max_tokens": 5}},
        {"id": "chat", "messages": [{"role": "user", "content": "Hi"}]},
        {"id": "sys", "messages": [{"role": "system", "content": "Mine."}, {"role": "user", "content": "Hi"}]},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    defaults = RequestDefaults(max_tokens=40, temperature=0.5, system_prompt="Be brief.")
    read = list(JobInput.open(str(path), columns=Columns(requests=defaults)).read())
    records = {r.record_id: r for r in read if isinstance(r, InputRecord)}
    assert all(r.attributes[REQUEST_ATTRIBUTE] == "true" for r in records.values())
    plain, own, chat, sys = (parse_request(records[k].text) for k in ("plain", "own", "chat", "sys"))
    assert plain.prompt is None
    assert plain.messages == (("system", "Be brief."), ("user", "Name a river."))
    assert plain.params == {"max_tokens": 40, "temperature": 0.5}
    assert own.params == {"max_tokens": 5, "temperature": 0.5}
    assert chat.messages == (("system", "Be brief."), ("user", "Hi"))
    assert sys.messages == (("system", "Mine."), ("user", "Hi"))  # its own system message is kept


def test_without_defaults_a_plain_text_stays_a_text(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("one\n")
    [record] = [r for r in JobInput.open(str(path)).read() if not isinstance(r, InputError)]
    assert isinstance(record, InputRecord) and record.text == "one" and not record.attributes


@pytest.mark.parametrize(
    ("defaults", "message"),
    [
        (RequestDefaults(max_tokens=0), '"max_tokens" must be an integer of at least 1, got 0'),
        (RequestDefaults(temperature=3.0), '"temperature" must be between 0 and 2, got 3.0'),
        (RequestDefaults(system_prompt="  "), "--system-prompt is empty"),
    ],
)
def test_defaults_no_request_could_run_with_are_refused(defaults: RequestDefaults, message: str) -> None:
    with pytest.raises(RequestError) as caught:
        defaults.check()
    assert str(caught.value) == message


def test_a_schedule_keeps_the_defaults_it_was_given() -> None:
    columns = Columns(requests=RequestDefaults(max_tokens=8, system_prompt="x"))
    assert Columns.from_json(columns.to_json()) == columns
