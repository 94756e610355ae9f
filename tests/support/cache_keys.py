"""The key a result is cached under, computed here from docs/reuse.md's definition (not by
reuse/keys.py, which the tests check against it): BLAKE2b-256 over the domain and the engine's
runtime, each after its length (8 bytes, big-endian), then the record's reuse key."""

from __future__ import annotations

import hashlib

ONNX_CPU = "onnxruntime/CPUExecutionProvider"  # the runtime of the ONNX Runtime engine on this machine's CPU


def cache_key(reuse_key: bytes, runtime: str) -> bytes:
    parts = [b"nearline.reuse.engine.v1", runtime.encode()]
    prefix = b"".join(len(p).to_bytes(8, "big") + p for p in parts)
    return hashlib.blake2b(prefix + reuse_key, digest_size=32).digest()
