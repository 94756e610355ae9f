"""Which version of a model is newer, and which one a worker serves when none is named.

A version is a number: whole numbers separated by dots (`1`, `2`, `10`, `1.9`, `1.10`), compared
number by number, so `10` is after `2` and `1.10` after `1.9`, as a release number reads. Triton's
versions are whole numbers; the dotted form is what a team that versions its models like its code
expects. `models import` takes only these. A repository may still hold a version folder of
another name (made by hand, or by a release that took any name): it is listed, served when named
(`name@v2`), older than every number, and never the default while a numbered version exists.

The default is the highest numbered version. A model with none has no default: a worker asked
for it without a version is told which versions there are and how to name one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# At most 8 parts of at most 9 digits each: compared as ints, never as text
NUMERIC_VERSION = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9}){0,7}")
VERSION_RULE = "whole numbers separated by dots, e.g. 1, 2, 10 or 1.10 (compared number by number)"


def is_numeric_version(version: str) -> bool:
    return NUMERIC_VERSION.fullmatch(version) is not None


def version_order(version: str) -> tuple[int, tuple[int, ...], str]:
    """The sort key of `version`, oldest first: every version that is not a number before every
    number (by name), numbers number by number; a tie (`1` and `01`) by name, so the order is total."""
    if is_numeric_version(version):
        return (1, tuple(int(part) for part in version.split(".")), version)
    return (0, (), version)


def ordered_versions(found: Iterable[str]) -> list[str]:
    """`found` oldest first (version_order)."""
    return sorted(found, key=version_order)


def default_version(available: Iterable[str]) -> str | None:
    """The version served when none is named: the highest number; None when none is a number."""
    numbers = [v for v in available if is_numeric_version(v)]
    return max(numbers, key=version_order) if numbers else None
