"""What a generation record asks, as it travels on raw.text for a causal LM: its text is a JSON
document, one request, written by the producers and read by the preprocess stage.

    {"prompt": "Once upon a time"}                                        a completion
    {"messages": [{"role": "system" | "user" | "assistant", "content": "..."}, ...]}   a chat
    ... with "params": {"max_tokens", "temperature", "top_p", "top_k", "seed", "stop"}, each optional

The preprocess stage renders the chat template and tokenizes; the sampling parameters go on with
the token ids in the record's SAMPLING_ATTRIBUTE (results leave it out of their attributes).
Every check a request gets is here, so `submit` refuses what a worker would dead-letter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

SAMPLING_ATTRIBUTE = "nearline.sampling"
# The attribute that marks a raw text record as a request (its text the JSON above): a plain text
# for a causal LM is a prompt, a request for any other model is refused. Results leave it out too.
REQUEST_ATTRIBUTE = "nearline.request"
INTERNAL_ATTRIBUTES = (SAMPLING_ATTRIBUTE, REQUEST_ATTRIBUTE)
ROLES = ("system", "user", "assistant")
PARAMS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop")
MAX_STOP_STRINGS = 4


class RequestError(ValueError):
    """A generation request that cannot run, saying which field and why."""


@dataclass(frozen=True)
class GenerationRequestDoc:
    """A parsed request: a prompt or chat messages (role, content), and its sampling parameters
    as given (only PARAMS, checked)."""

    prompt: str | None
    messages: tuple[tuple[str, str], ...]
    params: dict[str, Any]

    def to_text(self) -> str:
        doc: dict[str, Any] = {"prompt": self.prompt} if self.prompt is not None else {}
        if self.messages:
            doc["messages"] = [{"role": r, "content": c} for r, c in self.messages]
        if self.params:
            doc["params"] = self.params
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))

    def chat(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


def prompt_request(prompt: str, params: dict[str, Any] | None = None) -> GenerationRequestDoc:
    if not isinstance(prompt, str) or not prompt:
        raise RequestError(f'"prompt" must be a non-empty string, got {_shown(prompt)}')
    return GenerationRequestDoc(prompt, (), check_params(params or {}))


def chat_request(messages: Any, params: dict[str, Any] | None = None) -> GenerationRequestDoc:
    return GenerationRequestDoc(None, check_messages(messages), check_params(params or {}))


def parse_request(text: str) -> GenerationRequestDoc:
    """The request a raw text record of a causal LM carries, or RequestError."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"a generation record's text must be a JSON request: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise RequestError(f"a generation request must be an object, got {_shown(doc)}")
    params = doc.get("params", {})
    if not isinstance(params, dict):
        raise RequestError(f'"params" must be an object, got {_shown(params)}')
    if ("prompt" in doc) == ("messages" in doc):
        raise RequestError('a generation request has either "prompt" or "messages"')
    if "prompt" in doc:
        return prompt_request(doc["prompt"], params)
    return chat_request(doc["messages"], params)


def check_messages(messages: Any) -> tuple[tuple[str, str], ...]:
    """Chat messages as (role, content); content is a string or a list of text parts."""
    if not isinstance(messages, list) or not messages:
        raise RequestError(f'"messages" must be a non-empty list, got {_shown(messages)}')
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestError(f'"messages"[{i}] must be an object, got {_shown(message)}')
        role = message.get("role")
        if role not in ROLES:
            raise RequestError(f'"messages"[{i}].role must be one of {", ".join(ROLES)}, got {_shown(role)}')
        out.append((role, _content(message.get("content"), i)))
    return tuple(out)


def _content(content: Any, i: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(
                    f'"messages"[{i}].content[{j}] must be a text part {{"type": "text", "text": "..."}} '
                    f"(images and audio are not taken), got {_shown(part)}"
                )
            texts.append(part["text"])
        return "".join(texts)
    raise RequestError(f'"messages"[{i}].content must be a string or a list of text parts, got {_shown(content)}')


def check_params(params: dict[str, Any]) -> dict[str, Any]:
    """The sampling parameters, each checked: RequestError naming the first that cannot run."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise RequestError(f'"params" has {", ".join(unknown)}, which is not taken (taken: {", ".join(PARAMS)})')
    out: dict[str, Any] = {}
    if "max_tokens" in params:
        out["max_tokens"] = _integer(params, "max_tokens", 1)
    if "temperature" in params:
        value = _number(params, "temperature")
        if not 0 <= value <= 2:
            raise RequestError(f'"temperature" must be between 0 and 2, got {_shown(params["temperature"])}')
        out["temperature"] = value
    if "top_p" in params:
        value = _number(params, "top_p")
        if not 0 < value <= 1:
            raise RequestError(f'"top_p" must be above 0 and at most 1, got {_shown(params["top_p"])}')
        out["top_p"] = value
    if "top_k" in params:
        out["top_k"] = _integer(params, "top_k", 0)
    if "seed" in params and params["seed"] is not None:
        out["seed"] = _integer(params, "seed", -(2**63))
    if "stop" in params and params["stop"] is not None:
        out["stop"] = _stops(params["stop"])
    return out


def _stops(stop: Any) -> list[str]:
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise RequestError(f'"stop" must be a non-empty string or a list of them, got {_shown(stop)}')
    if len(stops) > MAX_STOP_STRINGS:
        raise RequestError(f'"stop" names {len(stops)} strings; at most {MAX_STOP_STRINGS} are taken')
    return stops


def _integer(params: dict[str, Any], name: str, least: int) -> int:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < least or value >= 2**63:
        raise RequestError(f'"{name}" must be an integer of at least {least}, got {_shown(value)}')
    return value


def _number(params: dict[str, Any], name: str) -> float:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise RequestError(f'"{name}" must be a number, got {_shown(value)}')
    return float(value)


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class RequestDefaults:
    """A job's defaults for its requests (`--max-tokens`, `--temperature`, `--system-prompt`): a
    request's own params win; a system prompt goes before a chat without one, and makes a plain
    prompt a chat of the system and the prompt as the user's turn."""

    max_tokens: int | None = None
    temperature: float | None = None
    system_prompt: str | None = None

    @property
    def given(self) -> bool:
        return self != RequestDefaults()

    def check(self) -> RequestDefaults:
        """Itself, or RequestError naming the default that no request could run with."""
        given = {k: v for k, v in (("max_tokens", self.max_tokens), ("temperature", self.temperature)) if v is not None}
        check_params(given)
        if self.system_prompt is not None and not self.system_prompt.strip():
            raise RequestError("--system-prompt is empty")
        return self

    def applied(self, text: str, is_request: bool) -> GenerationRequestDoc:
        """The request a record's text makes under these defaults (a plain text is a prompt)."""
        request = parse_request(text) if is_request else prompt_request(text)
        params = dict(request.params)
        if self.max_tokens is not None:
            params.setdefault("max_tokens", self.max_tokens)
        if self.temperature is not None:
            params.setdefault("temperature", self.temperature)
        messages = request.messages
        if self.system_prompt is not None:
            if request.prompt is not None:
                messages = (("system", self.system_prompt), ("user", request.prompt))
            elif messages[0][0] != "system":
                messages = (("system", self.system_prompt), *messages)
        prompt = None if messages else request.prompt
        return GenerationRequestDoc(prompt, messages, params)
