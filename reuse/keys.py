"""The reuse key of a record: BLAKE2b-256 over a canonical, length-prefixed encoding of what decides
its result, and nothing else.

    domain, model name, model version, model fingerprint (fingerprint.py), kind, content

where the content is a text's UTF-8 bytes, an image's encoded bytes, or for generation the request
as the job's defaults leave it (RequestDefaults.applied): the prompt or each message's role and
content, and the sampling parameters with their defaults filled in (a request that names the
model's default max_tokens and one that names none ask the same). Every field is written after its
length, so no two different inputs encode alike. A record's id, job and attributes never enter it.

A sampled request (temperature above 0) without a seed has no key: it is not meant to repeat. A
greedy request's seed is left out, since greedy decoding never reads it (and a request without
one is given a random one when it is submitted).
"""

from __future__ import annotations

import hashlib
import json

from reuse.fingerprint import DIGEST_SIZE, ModelFingerprint, length_prefixed
from schemas.generation_request import GenerationRequestDoc

DOMAIN = b"nearline.reuse.v1"
KINDS = ("text", "image", "generation")


class RecordKeys:
    """Reuse keys for the records of one model version: the fields every key of a kind shares are
    hashed once, and each record's key continues from a copy of that state."""

    def __init__(self, model: ModelFingerprint) -> None:
        self.model = model
        shared = hashlib.blake2b(digest_size=DIGEST_SIZE)
        for value in (DOMAIN, model.name.encode(), model.version.encode(), model.digest):
            shared.update(length_prefixed(value))
        self._kinds = {}
        for kind in KINDS:
            self._kinds[kind] = shared.copy()
            self._kinds[kind].update(length_prefixed(kind.encode()))

    def text(self, text: str | bytes) -> bytes:
        """The key of a text record (the text as given, not normalised: the tokenizer sees it so)."""
        return self._key("text", utf8(text) if isinstance(text, str) else text)

    def image(self, data: bytes) -> bytes:
        """The key of an image record: its encoded bytes, as the preprocess stage decodes them."""
        return self._key("image", data)

    def generation(self, request: GenerationRequestDoc) -> bytes | None:
        """The key of a generation request, or None for a sampled one without a seed."""
        content = generation_content(request, self.model.default_max_tokens)
        return None if content is None else self._key("generation", content)

    def _key(self, kind: str, content: bytes) -> bytes:
        h = self._kinds[kind].copy()
        h.update(len(content).to_bytes(8, "big"))
        h.update(content)
        return h.digest()


def generation_content(request: GenerationRequestDoc, default_max_tokens: int) -> bytes | None:
    """The canonical bytes of what a generation request asks, or None when it is not repeatable."""
    params = request.params
    temperature = float(params.get("temperature", 0.0))
    seed = params.get("seed")
    if temperature > 0 and seed is None:
        return None
    sampling = {
        "max_tokens": int(params.get("max_tokens", default_max_tokens)),
        "temperature": temperature,
        "top_p": float(params.get("top_p", 1.0)),
        "top_k": int(params.get("top_k", 0)),
        "stop": [stop] if isinstance(stop := params.get("stop", ()), str) else list(stop),
    }
    if seed is not None and temperature > 0:
        sampling["seed"] = int(seed)
    parts = [b"prompt", utf8(request.prompt)] if request.prompt is not None else [b"chat"]
    for role, content in request.messages:
        parts += [role.encode(), utf8(content)]
    parts.append(utf8(json.dumps(sampling, sort_keys=True, separators=(",", ":"), ensure_ascii=False)))
    return b"".join(length_prefixed(p) for p in parts)


def utf8(text: str) -> bytes:
    """A text's UTF-8 bytes; a lone surrogate (a JSON "\\ud800", a byte that was not UTF-8) is
    written as its three bytes, so every text has bytes and no two texts the same ones."""
    return text.encode("utf-8", "surrogatepass")


ENGINE_DOMAIN = b"nearline.reuse.engine.v1"


class CacheKeys:
    """The key a result is cached under in cache.<model>: BLAKE2b-256 over a record's reuse key and
    the engine that computed the result (its runtime: name, device or execution provider, and
    precision; gpu_consumer/cache_writes.py runtime_of). Two engines, or one engine in two
    precisions, write different bytes for the same record, so each has keys of its own: the GPU
    worker caches under its own engine's, the preprocess worker looks up under the engine that
    serves the model."""

    def __init__(self, runtime: str) -> None:
        self.runtime = runtime
        self._base = hashlib.blake2b(digest_size=DIGEST_SIZE)
        self._base.update(length_prefixed(ENGINE_DOMAIN))
        self._base.update(length_prefixed(runtime.encode()))

    def __call__(self, key: bytes) -> bytes:
        h = self._base.copy()
        h.update(key)
        return h.digest()
