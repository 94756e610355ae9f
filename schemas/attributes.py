"""Input attributes in flight: every value is carried as its JSON text in the records'
map<string,string> ({"n": 5} travels as {"n": "5"}, {"s": "5"} as {"s": "\\"5\\""}), so stages
pass the map on untouched and only the output decodes it. No schema changed: old records stay
readable, and a value that is not JSON text (written before values were, as Python's str())
comes back as the string it is. JSON has no NaN or Infinity, so the producers refuse them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# A reused result's timestamps carry this stage (when it was written from the cache)
REUSED_STAMP = "reused"


def attribute_text(value: Any) -> str:
    """A JSON value as it travels; ValueError for a NaN or an infinity anywhere in it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _refuse_constant(name: str) -> Any:
    raise ValueError(name)


def attribute_values(attributes: Mapping[str, str]) -> dict[str, Any]:
    """The map as the JSON values it carries; a value that is not JSON text is left a string."""
    values: dict[str, Any] = {}
    for key, text in attributes.items():
        try:
            values[key] = json.loads(text, parse_constant=_refuse_constant)
        except ValueError:  # a record from before values were JSON text, or NaN spelled out
            values[key] = text
    return values
