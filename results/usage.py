"""What a job used, counted from the results its GPU workers wrote: records, input tokens (texts)
or pixels (images), completion tokens (generations), and engine time. Each record counts once, as
the results fold keeps it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import InferenceResult
from schemas.inference_result_bytes import engine_share_us, read_result_usage
from schemas.serde import decode_fields


@dataclass
class Usage:
    records: int = 0
    length: int = 0  # tokens of every text, or pixels of every image, as the engine ran them
    engine_us: float = 0.0  # each record's share of its executed batch's engine time
    completion_tokens: int = 0  # tokens the generations produced
    reused: int = 0  # records whose result came from the results cache: no tokens, no engine time

    def add_bytes(self, value: bytes, reused: bool = False) -> None:
        """Count one result, read from its bytes (another writer schema, and a generation's
        result, are decoded whole). A reused one counts as a record only (docs/reuse.md)."""
        if reused:
            self.records += 1
            self.reused += 1
            return
        usage = read_result_usage(value)
        if usage is None:
            self.add_fields(decode_fields(value, InferenceResult))
            return
        self.records += 1
        self.length += usage.length
        self.engine_us += usage.engine_us

    def add_fields(self, fields: dict[str, Any], reused: bool = False) -> None:
        """Count one decoded result."""
        self.records += 1
        if reused:
            self.reused += 1
            return
        self.length += fields["length"]
        self.engine_us += engine_share_us(fields["timestamps"], fields["batch_size"])
        self.completion_tokens += fields["completion_tokens"]

    def to_dict(self, kind: str) -> dict[str, Any]:
        """The usage document of `status --json` and `jobs list --json`: OpenAI's names where they
        exist; completion_tokens only where generations produced some."""
        document: dict[str, Any] = {
            "records": self.records,
            "input_tokens" if kind == "text" else "pixels": self.length,
        }
        if self.completion_tokens:
            document["completion_tokens"] = self.completion_tokens
        document["reused_records"] = self.reused
        document["engine_seconds"] = round(self.engine_us / 1e6, 6)
        return document

    def text(self, kind: str) -> str:
        unit = "input tokens" if kind == "text" else "pixels"
        completions = f", {self.completion_tokens:,} completion tokens" if self.completion_tokens else ""
        reused = f" ({self.reused:,} reused)" if self.reused else ""
        return (
            f"{self.records:,} records{reused}, {self.length:,} {unit}{completions}, "
            f"{self.engine_us / 1e6:.2f} engine-s"
        )


def generation_usage(result: InferenceResult) -> dict[str, int]:
    """A generation's tokens: its prompt's (its length), those it produced, and those of its prompt
    whose keys and values came from a shared prefix (OpenAI's prompt_tokens_details.cached_tokens)."""
    return {
        "prompt_tokens": result.length,
        "completion_tokens": result.completion_tokens,
        "cached_prompt_tokens": result.cached_prompt_tokens,
    }
