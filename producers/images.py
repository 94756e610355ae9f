"""Image inputs: a folder of images (recursive, by extension), or JSON Lines of {"id", "image": path}.

Only the files' kind and size are checked here; whether the bytes are a decodable image is the
preprocess stage's call (a bad image becomes a dead letter with the reason, not a failed submit).
What is not a regular file (a folder, a FIFO, a device such as /dev/zero) is refused at submit,
naming the path and line: reading one would block, never end, or send nothing.
"""

from __future__ import annotations

import json
import mimetypes
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from producers.inputs import InputError, check_attributes, decode_line, lone_surrogate, record_id_of

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"})
# Kafka clusters commonly cap records near 1-10 MB; an image over the cap is refused at submit,
# never truncated. Raise it (and the cluster's max.message.bytes) for bigger images.
MAX_IMAGE_BYTES = 10 * 1024 * 1024


class ImageFileError(OSError):
    """An image path that is not a readable regular file under the size cap; the message says why."""


@dataclass(frozen=True)
class ImageRecord:
    record_id: str
    path: Path
    line: int
    attributes: dict[str, str] = field(default_factory=dict)
    data: bytes | None = None  # the image itself, from a table's binary column; else read from path

    @property
    def content_type(self) -> str:
        if self.data is not None:
            return sniffed_type(self.data)
        return mimetypes.guess_type(self.path.name)[0] or "application/octet-stream"


# What image files start with, for bytes that come without a file name (a table's binary column)
_MAGIC = (
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"GIF8", "image/gif"),
    (b"BM", "image/bmp"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
)


def sniffed_type(data: bytes) -> str:
    """The MIME type image bytes' first bytes name, else application/octet-stream."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _MAGIC if data.startswith(magic)), "application/octet-stream")


def is_image_path(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def file_kind(mode: int) -> str:
    """What a stat mode names, for messages."""
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_image_file(path: Path, max_bytes: int, *, content: bool = True) -> bytes:
    """The bytes of a regular file of at most max_bytes, or ImageFileError saying why not.

    stat first, so a device or FIFO is never opened; then O_NONBLOCK, so a FIFO swapped in since
    cannot block the open, and fstat on the opened fd, so what is read is what was checked. At most
    max_bytes + 1 bytes are read: a file that grew past the cap is refused, never read whole."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise ImageFileError(f"image {path} is {file_kind(mode)}, not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except ImageFileError:
        raise
    except OSError as exc:
        raise ImageFileError(f"cannot read image {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ImageFileError(f"image {path} is {file_kind(info.st_mode)}, not a regular file")
        if info.st_size > max_bytes:
            raise ImageFileError(f"image {path} is {info.st_size} bytes, over the record limit of {max_bytes}")
        if not content:
            return b""
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ImageFileError(f"image {path} grew past the record limit of {max_bytes} bytes while being read")
    return data


def checked_image(record: ImageRecord, where: str, line: int, max_bytes: int) -> ImageRecord | InputError:
    """record, or the problem of its path (not a regular file, over max_bytes) pinned to where:line."""
    try:
        read_image_file(record.path, max_bytes, content=False)
    except ImageFileError as exc:
        return InputError(where, line, str(exc))
    return record


def _outside(path: Path, root: Path) -> bool:
    return not path.resolve().is_relative_to(root)


def read_image_folder(
    folder: Path, max_bytes: int = MAX_IMAGE_BYTES, *, follow_symlinks: bool = False
) -> Iterator[ImageRecord | InputError]:
    """Every image file under `folder`, in path order; ids are paths relative to it.

    Hidden files and folders (".DS_Store", "._IMG_1.jpg", ".thumbnails/") are not part of it,
    as a shell's `*` leaves them out. A symlink that leads out of the folder is reported, not
    followed, unless follow_symlinks: a folder handed over as input should not read files from
    elsewhere by accident. A subfolder that cannot be read, and a file name that is not UTF-8
    (an id must be text), are reported: either would leave images out without a word."""
    if not folder.is_dir():
        if not folder.exists():
            yield InputError(str(folder), 0, "no such file or folder")
            return
        yield checked_image(ImageRecord(folder.name, folder, 0), str(folder), 0, max_bytes)
        return
    walk = _walk_folder(folder, follow_symlinks)
    yield from walk.refused
    for path in walk.images:
        record_id = path.relative_to(folder).as_posix()
        if lone_surrogate(record_id):
            name = os.fsencode(path.name)
            yield InputError(printable(path), 0, f"the file name {name!r} is not UTF-8: rename the file")
            continue
        yield checked_image(ImageRecord(record_id, path, 0), str(path), 0, max_bytes)


def left_out_files(folder: Path, *, follow_symlinks: bool = False) -> list[Path]:
    """The files under `folder` that read_image_folder leaves out because their names are not
    images' (.heic, .txt, ...), in path order; hidden files are not counted."""
    if not folder.is_dir():
        return []
    return _walk_folder(folder, follow_symlinks).others


def printable(path: Path | str) -> str:
    """A path for a message: control characters, and bytes that are not UTF-8, escaped, so a
    file name cannot break a line or reach the terminal as a control sequence."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(path))


@dataclass
class _FolderWalk:
    images: list[Path] = field(default_factory=list)
    refused: list[InputError] = field(default_factory=list)
    others: list[Path] = field(default_factory=list)  # not images by name


def _walk_folder(folder: Path, follow_symlinks: bool) -> _FolderWalk:
    root = folder.resolve()
    walk = _FolderWalk()

    def unreadable(exc: OSError) -> None:
        where = printable(exc.filename or folder)
        walk.refused.append(InputError(where, 0, f"cannot read this folder: {exc.strerror}"))

    seen_dirs: set[tuple[int, int]] = set()  # followed links can make cycles
    for top, dirs, files in os.walk(folder, onerror=unreadable, followlinks=follow_symlinks):
        here = Path(top)
        info = here.stat()
        if (info.st_dev, info.st_ino) in seen_dirs:
            dirs.clear()
            continue
        seen_dirs.add((info.st_dev, info.st_ino))
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        for name in dirs:
            sub = here / name
            if not follow_symlinks and sub.is_symlink() and _outside(sub, root):
                walk.refused.append(_link_out(sub, folder))
        for name in files:
            path = here / name
            if name.startswith("."):
                continue
            if not is_image_path(path):
                walk.others.append(path)
            elif not follow_symlinks and path.is_symlink() and _outside(path, root):
                walk.refused.append(_link_out(path, folder))
            else:
                walk.images.append(path)
    walk.images.sort()
    walk.others.sort()
    return walk


def _link_out(path: Path, folder: Path) -> InputError:
    return InputError(
        printable(path),
        0,
        f"symlink to {printable(os.readlink(path))}, outside {printable(folder)}: not followed "
        "(pass --follow-symlinks to read it)",
    )


def read_image_jsonl(path: Path, max_bytes: int = MAX_IMAGE_BYTES) -> Iterator[ImageRecord | InputError]:
    """{"id": ..., "image": "relative/or/absolute/path", "attributes": {...}} per line; relative
    paths are taken from the JSONL file's folder."""
    seen: dict[str, int] = {}
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            try:
                line = decode_line(raw, number).strip()
                if not line:
                    continue
                obj = json.loads(line)
                if not isinstance(obj, dict) or not isinstance(obj.get("image"), str) or not obj["image"]:
                    raise ValueError('expected {"image": "<path>"}')
                surrogate = lone_surrogate(obj["image"])
                if surrogate:
                    raise ValueError(f'"image" holds a lone surrogate ({surrogate}), which is not valid Unicode')
                record_id = record_id_of(obj, number)
                attributes = check_attributes(obj)
            except json.JSONDecodeError as exc:
                yield InputError(str(path), number, f"invalid JSON: {exc.msg} (column {exc.colno})")
                continue
            except ValueError as exc:
                yield InputError(str(path), number, str(exc))
                continue
            if record_id in seen:
                yield InputError(str(path), number, f"duplicate id {record_id!r} (first on line {seen[record_id]})")
                continue
            seen[record_id] = number
            image = ImageRecord(record_id, path.parent / obj["image"], number, attributes)
            yield checked_image(image, str(path), number, max_bytes)
