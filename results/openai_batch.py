"""A job of OpenAI batch requests written back in OpenAI's batch output shape, one line per request
(`--output-format openai-batch`), and its error file in OpenAI's error shape.

A request's records are its input strings (producers/openai_batch.py); its output line holds every
one's embedding in `data[index]`, with `usage.prompt_tokens` the tokens the engine ran. A request
with any input that has no result goes to the error file instead, whole: OpenAI answers a
request or fails it, never half. Classifiers are ours, not OpenAI's: their `data` items are
{"object": "classification", "index", "labels": [{"label", "index", "score"}]}. A generation's
request (its results have a finish_reason) is answered with a `chat.completion` body when its
`openai.url` attribute is /v1/chat/completions, else a `text_completion` body (/v1/completions,
or a prompt that came without a request), a choice per record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from producers import InputError
from producers.openai_batch import CHAT_COMPLETIONS_URL, CUSTOM_ID, INDEX, URL
from results.error_file import Missing
from results.job_output import JobOutput
from results.outcome import dumps_line, rounded
from results.output import each_line, write_lines
from results.submitted import Submitted
from schemas import DeadLetter, InferenceResult
from schemas.attributes import attribute_values

_MISSING_ERRORS = {
    "expired": ("batch_expired", "This request could not be executed before the completion window expired."),
    "cancelled": ("batch_cancelled", "This request was not executed: the batch was cancelled."),
    "not_done": ("not_done", "This request has no result yet: the batch is still running, or its workers are gone."),
}


# Dead letters of the preprocess stage that are not the input's fault: answered as OpenAI answers a
# server fault (500, worth a retry once fixed), where the input's own (400) are not worth one.
SERVER_SIDE = frozenset({"ModelNotFoundError", "ModelUnavailableError", "ModelError", "OSError"})


@dataclass(frozen=True)
class Request:
    custom_id: str
    record_ids: tuple[str, ...]  # its input strings' records, in input order


def requests_of(submitted: Iterable[Submitted]) -> list[Request]:
    """The requests a job's records make up, in input order: a request's records are consecutive,
    its first at index 0 (two files of a glob may each hold a request of one custom_id). A record
    that is not of an OpenAI batch file is a request of its own, named by its id."""
    requests: list[Request] = []
    current: tuple[str, list[str]] | None = None
    for record in submitted:
        raw, index = record.attributes.get(CUSTOM_ID), record.attributes.get(INDEX)
        custom_id = json.loads(raw) if raw is not None else record.record_id
        if current is not None and raw is not None and index not in (None, "0") and current[0] == custom_id:
            current[1].append(record.record_id)
            continue
        if current is not None:
            requests.append(Request(current[0], tuple(current[1])))
        current = (custom_id, [record.record_id])
    if current is not None:
        requests.append(Request(current[0], tuple(current[1])))
    return requests


def write(job: JobOutput, path: Path | None, out: IO[str]) -> int:
    """The job's answered requests in OpenAI's batch output shape to path (or out); the lines written."""
    results = (item for item in job.spill.ordered() if isinstance(item, InferenceResult))
    lines = output_lines(requests_of(job.submitted), results, job.spill.job_id)
    return write_lines(path, out, each_line(dumps_line(line) for line in lines))


def error_lines_of(job: JobOutput, missing: Missing, invalid: Iterable[InputError]) -> Iterator[dict[str, Any]]:
    """The error file in OpenAI's error shape: a line per input line left out (`invalid`), then per
    request with an input that has no result (error_lines)."""
    yield from (invalid_line(error) for error in invalid)
    yield from error_lines(requests_of(job.submitted), job.spill.outcomes(), missing, job.spill.job_id)


def output_lines(requests: list[Request], results: Iterable[InferenceResult], job_id: str) -> Iterator[dict[str, Any]]:
    """One line per request every input of which has a result, in input order. `results`: the
    job's results (one per record), in input order."""
    owner = {rid: k for k, request in enumerate(requests) for rid in request.record_ids}
    held: dict[int, dict[str, InferenceResult]] = {}
    for result in results:
        k = owner.get(result.record_id)
        if k is None:
            continue
        got = held.setdefault(k, {})
        got[result.record_id] = result
        if len(got) == len(requests[k].record_ids):
            del held[k]
            yield _success(requests[k], got, job_id, k)


def _success(request: Request, got: Mapping[str, InferenceResult], job_id: str, k: int) -> dict[str, Any]:
    results = [got[rid] for rid in request.record_ids]
    request_id = f"{job_id}-{k}"
    if results[0].finish_reason:  # a generation's request
        chat = request_url(results[0]) == CHAT_COMPLETIONS_URL
        body = chat_completion_body(request_id, results) if chat else text_completion_body(request_id, results)
    else:
        body = {
            "object": "list",
            "data": [_datum(i, result) for i, result in enumerate(results)],
            "model": results[0].model,
            "usage": {
                "prompt_tokens": sum(r.length for r in results),
                "total_tokens": sum(r.length for r in results),
            },
        }
    return {
        "id": request_id,
        "custom_id": request.custom_id,
        "response": {"status_code": 200, "request_id": request_id, "body": body},
        "error": None,
    }


def request_url(result: InferenceResult) -> Any:
    """The url the result's request named (its openai.url attribute), None where it has none."""
    text = result.attributes.get(URL)
    return None if text is None else attribute_values({URL: text})[URL]


def chat_completion_body(request_id: str, results: Sequence[InferenceResult]) -> dict[str, Any]:
    """OpenAI's chat.completion for a request of generation results: a choice per result (a
    chat request is one), its text the assistant message's content."""
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": result.text},
            "finish_reason": result.finish_reason,
        }
        for i, result in enumerate(results)
    ]
    return _completion(f"chatcmpl-{request_id}", "chat.completion", choices, results)


def text_completion_body(request_id: str, results: Sequence[InferenceResult]) -> dict[str, Any]:
    """OpenAI's text_completion for a request of generation results: a choice per result (per
    prompt of the request), in input order."""
    choices = [
        {"index": i, "text": result.text, "finish_reason": result.finish_reason} for i, result in enumerate(results)
    ]
    return _completion(f"cmpl-{request_id}", "text_completion", choices, results)


def _completion(
    body_id: str, kind: str, choices: list[dict[str, Any]], results: Sequence[InferenceResult]
) -> dict[str, Any]:
    """The body around the choices: `created` is when the last result was produced (Unix
    seconds), so writing a job's output again gives the same lines."""
    prompt = sum(r.length for r in results)
    completion = sum(r.completion_tokens for r in results)
    return {
        "id": body_id,
        "object": kind,
        "created": max(r.timestamps.get("result_produced", 0) for r in results) // 1_000_000,
        "model": results[0].model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(r.cached_prompt_tokens for r in results)},
        },
    }


def _datum(index: int, result: InferenceResult) -> dict[str, Any]:
    arrays = result.arrays()
    if result.labels:
        scores, indexes = arrays["top_score"], arrays["top_index"]
        labels = [
            {"label": label, "index": int(i), "score": round(float(s), 6)}
            for label, i, s in zip(result.labels, indexes, scores, strict=True)
        ]
        return {"object": "classification", "index": index, "labels": labels}
    name = next((n for n in arrays if "embedding" in n), next(iter(arrays)))
    return {"object": "embedding", "index": index, "embedding": rounded(arrays[name].ravel())}


def invalid_line(error: InputError) -> dict[str, Any]:
    """A line of the batch file refused at submit and left out (--skip-invalid), as the 400 OpenAI
    gives a request it cannot read; its custom_id may be what was wrong with it, so it is null."""
    body = {"message": str(error), "type": "invalid_request_error", "param": None, "code": "invalid_request"}
    return {
        "id": None,
        "custom_id": None,
        "response": {"status_code": 400, "request_id": None, "body": {"error": body}},
        "error": None,
    }


def error_lines(
    requests: list[Request], outcomes: Mapping[str, DeadLetter | None], missing: Missing, job_id: str
) -> Iterator[dict[str, Any]]:
    """One line per request with an input that has no result, in OpenAI's error shape: a dead-lettered
    input as the 400 response OpenAI gives an invalid request; an input never run as OpenAI's
    batch_expired (or, ours, batch_cancelled and not_done) error."""
    for k, request in enumerate(requests):
        if all(rid in outcomes and outcomes[rid] is None for rid in request.record_ids):
            continue
        line: dict[str, Any] = {"id": f"{job_id}-{k}", "custom_id": request.custom_id, "response": None, "error": None}
        dead = next(
            ((i, letter) for i, rid in enumerate(request.record_ids) if (letter := outcomes.get(rid)) is not None), None
        )
        if dead is not None:
            i, letter = dead
            # a string input is the record custom_id, a list's are custom_id[i] (one item too)
            param = "input" if request.record_ids[i] == request.custom_id else f"input[{i}]"
            client = letter.stage == "preprocess" and letter.error_type not in SERVER_SIDE
            line["response"] = {
                "status_code": 400 if client else 500,
                "request_id": f"{job_id}-{k}",
                "body": {
                    "error": {
                        "message": f"{letter.stage}: {letter.error}",
                        "type": "invalid_request_error" if client else "server_error",
                        "param": param,
                        "code": letter.error_type,
                    }
                },
            }
        else:
            code, message = _MISSING_ERRORS[missing]
            line["error"] = {"code": code, "message": message}
        yield line
