"""A job's outcomes written back per request: OpenAI's output lines for the requests every input of
which has a result, OpenAI's error lines for the rest, and our per-record error file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from producers import InputRecord
from producers.openai_batch import (
    CHAT_COMPLETIONS_URL,
    COMPLETIONS_URL,
    CUSTOM_ID,
    INDEX,
    INPUTS,
    URL,
    read_openai_batch,
)
from results import error_file, openai_batch
from results.submitted import Submitted
from schemas import DeadLetter, InferenceResult, Tensor
from schemas.generation_request import INTERNAL_ATTRIBUTES


def submitted(custom_id: str, n: int, seq: int) -> list[Submitted]:
    ids = [custom_id] if n == 1 else [f"{custom_id}[{i}]" for i in range(n)]
    return [
        Submitted(rid, seq + i, {CUSTOM_ID: f'"{custom_id}"', INDEX: str(i), INPUTS: str(n)})
        for i, rid in enumerate(ids)
    ]


def result(record_id: str, seq: int, value: float, length: int) -> InferenceResult:
    vector = Tensor.from_array("embedding", np.full(4, value, dtype=np.float32))
    return InferenceResult("job", record_id, seq, "minilm", "1", (vector,), "b", 2, length=length)


def letter(record_id: str) -> DeadLetter:
    return DeadLetter("preprocess", "TokenizerError", "cannot tokenize", "raw.text", 0, 5, b"", 1, "job", record_id)


RECORDS = [*submitted("a", 1, 0), *submitted("b", 3, 1), *submitted("c", 2, 4), *submitted("d", 1, 6)]


def test_requests_are_the_consecutive_records_of_one_custom_id() -> None:
    assert openai_batch.requests_of(RECORDS) == [
        openai_batch.Request("a", ("a",)),
        openai_batch.Request("b", ("b[0]", "b[1]", "b[2]")),
        openai_batch.Request("c", ("c[0]", "c[1]")),
        openai_batch.Request("d", ("d",)),
    ]
    plain = [Submitted("x", 0), Submitted("y", 1)]  # not from a batch file: a request per record
    assert [r.custom_id for r in openai_batch.requests_of(plain)] == ["x", "y"]
    # a glob of two files, each with a request "x": two requests, not one of three inputs
    two_files = [*submitted("x", 2, 0), *submitted("x", 1, 2)]
    assert [r.record_ids for r in openai_batch.requests_of(two_files)] == [("x[0]", "x[1]"), ("x",)]
    # a JSON Lines input's own attributes named like ours are its own
    own = [Submitted("r1", 0, {"custom_id": '"c"', "index": '"first"'}), Submitted("r2", 1, {"custom_id": '"c"'})]
    assert [r.custom_id for r in openai_batch.requests_of(own)] == ["r1", "r2"]
    assert [line["id"] for line in error_file.error_lines(own, {}, "expired")] == ["r1", "r2"]


def test_a_request_is_answered_once_every_input_has_a_result_in_index_order() -> None:
    requests = openai_batch.requests_of(RECORDS)
    # c[1] dead-lettered, d expired: only a and b are answered; b's results come out of order
    results = [result("a", 0, 0.5, 3), result("b[2]", 3, 3.0, 2), result("b[0]", 1, 1.0, 4), result("b[1]", 2, 2.0, 5)]
    results.append(result("c[0]", 4, 9.0, 1))
    lines = list(openai_batch.output_lines(requests, results, "job"))
    assert [line["custom_id"] for line in lines] == ["a", "b"]
    body = lines[1]["response"]["body"]
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert [float(d["embedding"][0]) for d in body["data"]] == [1.0, 2.0, 3.0]
    assert body["usage"] == {"prompt_tokens": 11, "total_tokens": 11} and body["model"] == "minilm"
    assert lines[0]["response"]["status_code"] == 200 and lines[0]["error"] is None


def test_a_failed_request_is_one_openai_error_line_and_a_record_never_run_is_batch_expired() -> None:
    requests = openai_batch.requests_of(RECORDS)
    outcomes = {"a": None, "b[0]": None, "b[1]": None, "b[2]": None, "c[0]": None, "c[1]": letter("c[1]")}
    lines = list(openai_batch.error_lines(requests, outcomes, "expired", "job"))
    assert [line["custom_id"] for line in lines] == ["c", "d"]
    invalid = lines[0]["response"]
    assert invalid["status_code"] == 400 and lines[0]["error"] is None
    assert invalid["body"]["error"]["param"] == "input[1]"
    assert invalid["body"]["error"]["message"] == "preprocess: cannot tokenize"
    assert lines[1]["response"] is None and lines[1]["error"]["code"] == "batch_expired"
    cancelled = list(openai_batch.error_lines(requests, {}, "cancelled", "job"))
    assert {line["error"]["code"] for line in cancelled} == {"batch_cancelled"} and len(cancelled) == 4


def test_the_error_file_lists_each_record_without_a_result_with_why() -> None:
    outcomes = {"a": None, "b[0]": None, "b[2]": letter("b[2]")}
    lines = list(error_file.error_lines(RECORDS, outcomes, "not_done"))
    assert [(line["id"], line["status"]) for line in lines] == [
        ("b[1]", "not_done"),
        ("b[2]", "dead_lettered"),
        ("c[0]", "not_done"),
        ("c[1]", "not_done"),
        ("d", "not_done"),
    ]
    assert lines[1]["error"] == {"stage": "preprocess", "type": "TokenizerError", "message": "cannot tokenize"}
    assert lines[1]["custom_id"] == "b" and lines[1]["index"] == 2
    plain = list(error_file.error_lines([Submitted("r1", 0), Submitted("r2", 1)], {"r1": None}, "expired"))
    assert plain == [{"id": "r2", "status": "expired"}]


def test_a_fault_that_is_not_the_inputs_is_a_500_and_a_one_item_list_names_its_item() -> None:
    requests = openai_batch.requests_of(
        [*submitted("solo", 1, 0), Submitted("one[0]", 1, {CUSTOM_ID: '"one"', INDEX: "0"})]
    )
    missing_model = DeadLetter("preprocess", "ModelNotFoundError", "no model minilm", "raw.text", 0, 1, b"", 1)
    outcomes = {"solo": missing_model, "one[0]": letter("one[0]")}
    lines = list(openai_batch.error_lines(requests, outcomes, "not_done", "job"))
    server, client = lines[0]["response"], lines[1]["response"]
    assert (server["status_code"], server["body"]["error"]["type"], server["body"]["error"]["param"]) == (
        500,
        "server_error",
        "input",
    )
    assert (client["status_code"], client["body"]["error"]["param"]) == (400, "input[0]")


def generated(record_id: str, seq: int, text: str, finish_reason: str, url: str | None) -> InferenceResult:
    attributes = {CUSTOM_ID: f'"{record_id.split("[")[0]}"', INDEX: str(seq % 2)}
    if url is not None:
        attributes[URL] = f'"{url}"'
    return InferenceResult(
        "job",
        record_id,
        seq,
        "tiny-lm",
        "1",
        (),
        "gen:0",
        2,
        attributes,
        {"result_produced": 1_764_822_600_250_000},
        length=9,
        text=text,
        finish_reason=finish_reason,
        completion_tokens=4,
        cached_prompt_tokens=6,
    )


def test_a_chat_request_is_answered_with_a_chat_completion() -> None:
    result = generated("q", 0, "Paris.", "stop", CHAT_COMPLETIONS_URL)
    assert openai_batch.chat_completion_body("job-0", [result]) == {
        "id": "chatcmpl-job-0",
        "object": "chat.completion",
        "created": 1_764_822_600,
        "model": "tiny-lm",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": 4,
            "total_tokens": 13,
            "prompt_tokens_details": {"cached_tokens": 6},
        },
    }
    [line] = openai_batch.output_lines(openai_batch.requests_of(submitted("q", 1, 0)), [result], "job")
    assert line["response"]["body"] == openai_batch.chat_completion_body("job-0", [result])
    assert (line["id"], line["custom_id"], line["response"]["status_code"], line["error"]) == ("job-0", "q", 200, None)


def test_a_completions_request_is_answered_with_a_text_completion_a_choice_per_prompt() -> None:
    results = [
        generated("t[0]", 0, " the end", "stop", COMPLETIONS_URL),
        generated("t[1]", 1, " and then", "length", COMPLETIONS_URL),
    ]
    [line] = openai_batch.output_lines(openai_batch.requests_of(submitted("t", 2, 0)), results, "job")
    assert line["response"]["body"] == {
        "id": "cmpl-job-0",
        "object": "text_completion",
        "created": 1_764_822_600,
        "model": "tiny-lm",
        "choices": [
            {"index": 0, "text": " the end", "finish_reason": "stop"},
            {"index": 1, "text": " and then", "finish_reason": "length"},
        ],
        "usage": {
            "prompt_tokens": 18,
            "completion_tokens": 8,
            "total_tokens": 26,
            "prompt_tokens_details": {"cached_tokens": 12},
        },
    }


def test_a_generation_without_a_request_url_is_a_text_completion_and_embeddings_stay_a_list() -> None:
    plain = generated("x", 0, "text", "stop", None)
    [line] = openai_batch.output_lines([openai_batch.Request("x", ("x",))], [plain], "job")
    assert line["response"]["body"]["object"] == "text_completion"
    assert line["response"]["body"]["choices"] == [{"index": 0, "text": "text", "finish_reason": "stop"}]
    [embedded] = openai_batch.output_lines(
        openai_batch.requests_of(submitted("a", 1, 0)), [result("a", 0, 1, 3)], "job"
    )
    assert embedded["response"]["body"]["object"] == "list"


def test_a_batch_files_chat_and_completion_requests_are_answered_in_their_own_shapes(tmp_path: Path) -> None:
    """The wiring: the records producers/openai_batch.py reads, their results carrying the
    attributes a GPU worker repeats (all but the internal ones), answered by their url."""
    chat_body = {"model": "lm", "messages": [{"role": "user", "content": "Hi"}]}
    lines = [
        {"custom_id": "c1", "method": "POST", "url": CHAT_COMPLETIONS_URL, "body": chat_body},
        {"custom_id": "p1", "method": "POST", "url": COMPLETIONS_URL, "body": {"model": "lm", "prompt": "Once"}},
    ]
    path = tmp_path / "batch.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    records = [r for r in read_openai_batch(path) if isinstance(r, InputRecord)]
    submitted = [Submitted(r.record_id, seq, r.attributes) for seq, r in enumerate(records)]
    results = [
        InferenceResult(
            "job",
            r.record_id,
            seq,
            "lm",
            "1",
            (),
            "g",
            2,
            {k: v for k, v in r.attributes.items() if k not in INTERNAL_ATTRIBUTES},
            length=2,
            text=["Hello!", " upon a time"][seq],
            finish_reason="stop",
            completion_tokens=3,
        )
        for seq, r in enumerate(records)
    ]
    chat, completion = openai_batch.output_lines(openai_batch.requests_of(submitted), results, "job")
    assert (chat["custom_id"], chat["response"]["body"]["object"]) == ("c1", "chat.completion")
    assert chat["response"]["body"]["choices"][0]["message"] == {"role": "assistant", "content": "Hello!"}
    assert (completion["custom_id"], completion["response"]["body"]["object"]) == ("p1", "text_completion")
    assert completion["response"]["body"]["choices"][0]["text"] == " upon a time"
