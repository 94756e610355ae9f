"""Which paths are table files, by their suffix (producers/formats.py names the table formats)."""

from __future__ import annotations

from pathlib import Path

from producers.formats import suffix_format


def table_format(path: Path) -> str | None:
    """The name of the table format `path`'s suffix says, else None."""
    found = suffix_format(path)
    return found.name if found is not None and found.table is not None else None


def table_files(folder: Path) -> list[Path]:
    """The table files under folder, recursively, in path order. Hidden files and those starting
    with "_" are not data (Spark's _SUCCESS and _metadata, a .crc file), as Spark and pyarrow skip them."""
    found = []
    for path in folder.rglob("*"):
        parts = path.relative_to(folder).parts
        if any(p.startswith((".", "_")) for p in parts) or table_format(path) is None:
            continue
        if path.is_file():
            found.append(path)
    return sorted(found)
