"""Image inputs: a folder of images (recursive, by extension), or JSON Lines of {"id", "image": path}.

Only the files' presence and size are checked here; whether the bytes are a decodable image is
the preprocess stage's call (a bad image becomes a dead letter with the reason, not a failed submit).
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from producers.inputs import InputError, decode_line

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"})
# Kafka clusters commonly cap records near 1-10 MB; an image over the cap is refused at submit,
# never truncated. Raise it (and the cluster's max.message.bytes) for bigger images.
MAX_IMAGE_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class ImageRecord:
    record_id: str
    path: Path
    line: int
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def content_type(self) -> str:
        return mimetypes.guess_type(self.path.name)[0] or "application/octet-stream"


def is_image_path(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def _checked(record: ImageRecord, where: str, line: int, max_bytes: int) -> ImageRecord | InputError:
    try:
        size = record.path.stat().st_size
    except OSError as exc:
        return InputError(where, line, f"cannot read image {record.path}: {exc.strerror}")
    if size > max_bytes:
        return InputError(where, line, f"image {record.path} is {size} bytes, over the record limit of {max_bytes}")
    return record


def read_image_folder(folder: Path, max_bytes: int = MAX_IMAGE_BYTES) -> Iterator[ImageRecord | InputError]:
    """Every image file under `folder`, in path order; ids are paths relative to it."""
    if folder.is_file():
        yield _checked(ImageRecord(folder.name, folder, 0), str(folder), 0, max_bytes)
        return
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and is_image_path(p)):
        yield _checked(ImageRecord(path.relative_to(folder).as_posix(), path, 0), str(path), 0, max_bytes)


def read_image_jsonl(path: Path, max_bytes: int = MAX_IMAGE_BYTES) -> Iterator[ImageRecord | InputError]:
    """{"id": ..., "image": "relative/or/absolute/path", "attributes": {...}} per line; relative
    paths are taken from the JSONL file's folder."""
    seen: dict[str, int] = {}
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            try:
                line = decode_line(raw).strip()
                if not line:
                    continue
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield InputError(str(path), number, f"invalid JSON: {exc.msg} (column {exc.colno})")
                continue
            except ValueError as exc:
                yield InputError(str(path), number, str(exc))
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get("image"), str) or not obj["image"]:
                yield InputError(str(path), number, 'expected {"image": "<path>"}')
                continue
            record_id = str(obj.get("id", number))
            if record_id in seen:
                yield InputError(str(path), number, f"duplicate id {record_id!r} (first on line {seen[record_id]})")
                continue
            seen[record_id] = number
            attributes = {str(k): str(v) for k, v in (obj.get("attributes") or {}).items()}
            image = ImageRecord(record_id, path.parent / obj["image"], number, attributes)
            yield _checked(image, str(path), number, max_bytes)
