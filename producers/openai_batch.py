"""OpenAI batch input: the Batch API's JSON Lines of requests, which `vllm run-batch` reads too.

    {"custom_id": "req-1", "method": "POST", "url": "/v1/embeddings",
     "body": {"model": "minilm", "input": "a text" | ["a text", "another"]}}
    {"custom_id": "req-2", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64}}
    {"custom_id": "req-3", "method": "POST", "url": "/v1/completions",
     "body": {"model": "smollm2-135m", "prompt": "Once upon a time", "max_tokens": 64, "stop": "\n"}}

Each input string of an embeddings request is one record: a request with a string input is the
record `custom_id`, one with a list is the records `custom_id[0]`, `custom_id[1]`, ... A chat or
completion request is one record, `custom_id`, whose text is the generation request
(schemas/generation_request.py). Each record carries its request in its attributes
(openai.custom_id, openai.index: its place in the input, openai.inputs: the request's input
count, openai.url), so that results can be written back in OpenAI's output shape
(results/openai_batch.py) without the input file. Body fields nearline does not run (tools,
response_format, logprobs, n > 1, ...) are refused by line, naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from producers.inputs import InputError, InputRecord, check_text, json_type, lone_surrogate, parsed_lines
from schemas.generation_request import REQUEST_ATTRIBUTE, GenerationRequestDoc, chat_request, prompt_request

EMBEDDINGS_URL = "/v1/embeddings"
CHAT_COMPLETIONS_URL = "/v1/chat/completions"
COMPLETIONS_URL = "/v1/completions"
URLS = (EMBEDDINGS_URL, CHAT_COMPLETIONS_URL, COMPLETIONS_URL)
# the attributes a record of an OpenAI batch file carries (values as JSON text, like any
# attribute), named apart from a JSON Lines input's own attributes
CUSTOM_ID, INDEX, INPUTS, URL = "openai.custom_id", "openai.index", "openai.inputs", "openai.url"
# A generation request's body fields that run, mapped to the sampling parameter each sets
SAMPLING_FIELDS = {
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "stop": "stop",
}
# Fields a generation body may hold that change nothing here (n and stream only at their default)
INERT_FIELDS = ("model", "messages", "prompt", "n", "stream", "user", "metadata", "store")


def is_openai_request(obj: Any) -> bool:
    """Whether a decoded JSON line is shaped as a batch request (how --format auto tells the files apart)."""
    return isinstance(obj, dict) and "custom_id" in obj and "body" in obj


def read_openai_batch(path: Path, stream: IO[bytes] | None = None) -> Iterator[InputRecord | InputError]:
    """The records of every request, in file order; a line that is not a request we can run is an
    InputError naming its line (all of its inputs are left out together, never part of a request).
    Every request must name the same model: one job runs one model."""
    seen: dict[str, int] = {}  # custom_id or record id -> the line it was first on
    inputs: dict[str, tuple[str, int]] = {}  # a listed input's record id -> its request's custom_id, index
    model: list[tuple[str, int]] = []  # the first request's, and its line

    def records(line: str, number: int) -> list[InputRecord]:
        custom_id, body_model, url, texts = _request(line)
        if custom_id in inputs:
            owner, index = inputs[custom_id]
            raise ValueError(
                f"custom_id {custom_id!r} is the id of input {index} of request {owner!r} (line "
                f"{seen[custom_id]}); rename one of them"
            )
        if custom_id in seen:
            raise ValueError(f"duplicate custom_id {custom_id!r} (first on line {seen[custom_id]})")
        if model and body_model != model[0][0]:
            raise ValueError(
                f"body.model is {body_model!r}, but line {model[0][1]} asks for {model[0][0]!r}: one job runs one "
                "model: split the file by model"
            )
        if isinstance(texts, GenerationRequestDoc):
            model[:] = model or [(body_model, number)]
            seen[custom_id] = number
            marks = {CUSTOM_ID: json.dumps(custom_id), INDEX: "0", INPUTS: "1", URL: json.dumps(url)}
            return [InputRecord(custom_id, texts.to_text(), number, {**marks, REQUEST_ATTRIBUTE: "true"})]
        listed = [texts] if isinstance(texts, str) else texts
        ids = [custom_id] if isinstance(texts, str) else [f"{custom_id}[{i}]" for i in range(len(texts))]
        clash = next((i for i in ids if i != custom_id and i in seen), None)
        if clash is not None:
            raise ValueError(f"its input {clash!r} has the id of the request on line {seen[clash]}")
        model[:] = model or [(body_model, number)]
        for record_id in (custom_id, *ids):
            seen.setdefault(record_id, number)
        if not isinstance(texts, str):
            inputs.update((record_id, (custom_id, i)) for i, record_id in enumerate(ids))
        return [
            InputRecord(
                record_id, text, number, {CUSTOM_ID: json.dumps(custom_id), INDEX: str(i), INPUTS: str(len(listed))}
            )
            for i, (record_id, text) in enumerate(zip(ids, listed, strict=True))
        ]

    for parsed in parsed_lines(path, stream, records):
        if isinstance(parsed, InputError):
            yield parsed
        else:
            yield from parsed


def batch_model(path: Path, stream: IO[bytes] | None = None) -> str | None:
    """The model the file's first valid request names (body.model), or None."""
    for parsed in parsed_lines(path, stream, lambda line, number: _request(line)[1]):
        if not isinstance(parsed, InputError):
            return parsed
    return None


def _request(line: str) -> tuple[str, str, str, str | list[str] | GenerationRequestDoc]:
    """(custom_id, body.model, url, body.input or the generation request) of one request line, or
    ValueError saying what is wrong."""
    try:
        obj: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a request object, got {json_type(obj)}")
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        got = "nothing" if custom_id is None else json.dumps(custom_id)
        raise ValueError(f'"custom_id" must be a non-empty string, got {got}')
    if (surrogate := lone_surrogate(custom_id)) is not None:
        raise ValueError(f'"custom_id" holds a lone surrogate ({surrogate}), which is not valid Unicode')
    method, url = obj.get("method", "POST"), obj.get("url")
    if method != "POST":
        raise ValueError(f'request {custom_id}: "method" must be "POST", got {json.dumps(method)}')
    if url not in URLS:
        raise ValueError(f'request {custom_id}: "url" must be one of {", ".join(URLS)}, got {json.dumps(url)}')
    body = obj.get("body")
    if not isinstance(body, dict):
        raise ValueError(f'request {custom_id}: "body" must be an object, got {json_type(body)}')
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ValueError(f'request {custom_id}: "body.model" must name a model, got {json.dumps(model)}')
    if url != EMBEDDINGS_URL:
        return custom_id, model, url, _generation(custom_id, url, body)
    if body.get("encoding_format", "float") != "float":
        raise ValueError(
            f'request {custom_id}: "encoding_format" {json.dumps(body["encoding_format"])} is not taken: '
            "embeddings come back as floats"
        )
    if "dimensions" in body:
        raise ValueError(f'request {custom_id}: "dimensions" is not taken: a model\'s embedding has its own size')
    return custom_id, model, url, _inputs(custom_id, body)


def _inputs(custom_id: str, body: dict[str, Any]) -> str | list[str]:
    if "input" not in body:
        raise ValueError(f'request {custom_id}: its body has no "input"')
    texts = body["input"]
    if isinstance(texts, list):
        if not texts:
            raise ValueError(f'request {custom_id}: "input" is an empty list')
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                what = "token arrays are not taken: give the text" if isinstance(text, int | list) else ""
                raise ValueError(
                    f'request {custom_id}: "input"[{index}] must be a string, got {json_type(text)}'
                    + (f" ({what})" if what else "")
                )
            if (problem := check_text(text)) is not None:
                raise ValueError(f'request {custom_id}: "input"[{index}]: {problem}')
        return texts
    if not isinstance(texts, str):
        raise ValueError(f'request {custom_id}: "input" must be a string or a list of strings, got {json_type(texts)}')
    if (problem := check_text(texts)) is not None:
        raise ValueError(f"request {custom_id}: {problem}")
    return texts


def _generation(custom_id: str, url: str, body: dict[str, Any]) -> GenerationRequestDoc:
    """A chat or completion request's body as a generation request, or ValueError naming the field."""
    refused = sorted(set(body) - set(SAMPLING_FIELDS) - set(INERT_FIELDS))
    if refused:
        raise ValueError(
            f'request {custom_id}: "{refused[0]}" is not supported (nearline runs plain text generation; '
            f"taken: {', '.join(sorted(set(SAMPLING_FIELDS) | set(INERT_FIELDS)))})"
        )
    if body.get("n", 1) != 1:
        n = json.dumps(body["n"])
        raise ValueError(f'request {custom_id}: "n" must be 1 (one completion per request), got {n}')
    if body.get("stream", False) is not False:
        raise ValueError(f'request {custom_id}: "stream" is not taken in a batch: results are written as they finish')
    if "max_tokens" in body and "max_completion_tokens" in body:
        raise ValueError(f'request {custom_id}: give "max_tokens" or "max_completion_tokens", not both')
    params = {SAMPLING_FIELDS[k]: v for k, v in body.items() if k in SAMPLING_FIELDS}
    try:
        if url == CHAT_COMPLETIONS_URL:
            if "prompt" in body:
                raise ValueError(f'"prompt" is for {COMPLETIONS_URL}; a chat request has "messages"')
            return chat_request(body.get("messages"), params)
        if "messages" in body:
            raise ValueError(f'"messages" is for {CHAT_COMPLETIONS_URL}; a completion request has "prompt"')
        prompt: Any = body.get("prompt")
        if isinstance(prompt, list):
            raise ValueError('"prompt" must be one string: a list of prompts is not taken (one request each)')
        request = prompt_request(prompt, params)
        if (problem := check_text(prompt)) is not None:
            raise ValueError(problem)
        return request
    except ValueError as exc:
        raise ValueError(f"request {custom_id}: {exc}") from None
