"""A job's terms besides its input, as the user gives them: labels (KEY=VALUE), a completion window
(a duration such as 24h, OpenAI's completion_window) and a webhook URL. Pure parsers, each with an
error that says what was wrong and what is expected; the terms themselves are a record both a Job
and a Schedule hold (schemas/terms.py: JobTerms)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

# A label's key: what Kubernetes allows in a label name (letters, digits, '-', '_', '.', an
# optional DNS prefix with '/'), so labels copy between the two; its value is any text but a newline.
LABEL_KEY = re.compile(r"(?:[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
MAX_LABEL_VALUE = 256
MAX_LABELS = 64

# Units largest first, each at most once ("1h30m", not "30s30s")
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)w)?(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?"
                       r"(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?")  # fmt: skip
_UNIT_S = (604800.0, 86400.0, 3600.0, 60.0, 1.0, 0.001)
# A window under a millisecond rounds to none at all; one past a year is a typo, and past
# ~292,000 years no longer fits the registry's microseconds.
MIN_WINDOW_S, MAX_WINDOW_S = 0.001, 366 * 86400.0
DURATION_RULE = "a number of seconds or a duration such as 90s, 30m, 24h, 1h30m or 7d"


def parse_duration(text: str) -> float:
    """Seconds in `text`: "24h", "1h30m", "90s", "500ms", "7d" or a bare number of seconds.
    ValueError (saying what a duration looks like) for anything else, and for a window under a
    millisecond or over a year."""
    spec = text.strip().lower()
    seconds: float | None = None
    if re.fullmatch(r"\d+(\.\d+)?", spec):
        seconds = float(spec)
    elif spec and (parts := _DURATION.fullmatch(spec)) is not None:
        seconds = sum(float(n) * unit for n, unit in zip(parts.groups(), _UNIT_S, strict=True) if n is not None)
    if seconds is None:
        raise ValueError(f"{text!r} is not a duration: use {DURATION_RULE}")
    if not MIN_WINDOW_S <= seconds <= MAX_WINDOW_S:
        raise ValueError(f"{text!r}: a completion window must be from 1ms to 366d")
    return seconds


def parse_labels(items: Iterable[str]) -> dict[str, str]:
    """KEY=VALUE items as a dict (a key given twice keeps its last value); ValueError naming the
    item that is not a label."""
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"{item!r} is not a label: use KEY=VALUE, e.g. --label team=search")
        if LABEL_KEY.fullmatch(key) is None:
            raise ValueError(
                f"{key!r} is not a label key: use letters, digits, '-', '_' and '.' (at most 63, starting and "
                "ending with a letter or digit), optionally after a DNS prefix and '/' (example.com/team)"
            )
        if "\n" in value or "\t" in value or len(value) > MAX_LABEL_VALUE:
            raise ValueError(
                f"label {key}: its value must be one line without tabs, at most {MAX_LABEL_VALUE} characters"
            )
        labels[key] = value.strip()
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{len(labels)} labels: a job takes at most {MAX_LABELS}")
    return labels


def webhook_problem(url: str, named: str | None = None) -> str | None:
    """Why `url` cannot be a webhook (not http or https, no host), or None. Whether it answers is
    learnt when the job ends: the notifier reports a failed delivery (nearline status). `named`:
    how the message names the URL (its repr by default; the notifier's, shown to others, without
    its secrets)."""
    named = repr(url) if named is None else named
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        return f"{named} is not a URL: {exc}"
    if parts.scheme not in ("http", "https"):
        return f"{named}: a webhook URL must start with http:// or https://"
    if not parts.hostname:
        return f"{named}: a webhook URL must name a host"
    return None
