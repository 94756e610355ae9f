"""Images the tests generate (the bad-image corpus) and the real photos that ship in packages."""

from __future__ import annotations

import importlib.util
import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, f"{name} is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def real_photos() -> list[Path]:
    """scikit-image's bundled images and scikit-learn's two sample photos: not drawn by us."""
    skimage = sorted(p for p in (package_dir("skimage") / "data").iterdir() if p.suffix in (".png", ".jpg"))
    sklearn = sorted((package_dir("sklearn") / "datasets" / "images").glob("*.jpg"))
    return skimage + sklearn


def encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **params)
    return out.getvalue()


def png_bomb(width: int = 30000, height: int = 30000) -> bytes:
    """A valid PNG header claiming width x height greyscale pixels, with almost no data behind it."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


def with_tiff_compression(data: bytes, value: int) -> bytes:
    """The TIFF with its first image's Compression tag (259) set to value, its pixels unchanged."""
    ifd = struct.unpack_from("<I", data, 4)[0]
    for entry in range(ifd + 2, ifd + 2 + 12 * struct.unpack_from("<H", data, ifd)[0], 12):
        if struct.unpack_from("<H", data, entry)[0] == 259:
            return data[: entry + 8] + struct.pack("<H", value) + data[entry + 10 :]
    raise AssertionError("no compression tag")


def halves(size: tuple[int, int] = (400, 300)) -> Image.Image:
    """Left half black, right half white: orientation shows in where the white ends up."""
    array = np.zeros((size[1], size[0], 3), dtype=np.uint8)
    array[:, size[0] // 2 :] = 255
    return Image.fromarray(array)


def bad_and_odd_images() -> dict[str, bytes]:
    """The corpus of issue 3: each must decode correctly or be refused with a specific reason."""
    photo = Image.open(real_photos()[0]).convert("RGB")
    jpeg = encode(photo, "JPEG", quality=90)
    palette = Image.new("P", (300, 300), 1)
    palette.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    palette.paste(0, (0, 0, 150, 300))
    frames = [Image.new("RGB", (300, 300), (255, 0, 0)), Image.new("RGB", (300, 300), (0, 0, 255))]
    gif = io.BytesIO()
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    with_alpha = photo.copy()
    with_alpha.putalpha(200)
    webp = encode(photo, "WEBP", quality=90)
    rotated = halves()
    exif = rotated.getexif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    return {
        "truncated.jpg": jpeg[: len(jpeg) // 2],
        "zero.jpg": b"",
        "text.jpg": b"this is a text file, not a JPEG\n",
        "bomb.png": png_bomb(),
        "cmyk.jpg": encode(Image.new("RGB", (300, 300), (200, 30, 30)).convert("CMYK"), "JPEG", quality=95),
        "grey16.png": encode(Image.fromarray(np.full((300, 300), 40000, dtype=np.uint16)), "PNG"),
        "palette-transparent.png": encode(palette, "PNG", transparency=0),
        "animated.gif": gif.getvalue(),
        "exif-rotated.jpg": encode(rotated, "JPEG", quality=95, exif=exif),
        "good.jpg": jpeg,
        # formats README lists, which the build must decode (#30: WebP and compressed TIFF were
        # dead-lettered), and what it cannot: said to be unsupported, not corrupt
        "lossy.webp": webp,
        "lossless-alpha.webp": encode(with_alpha, "WEBP", lossless=True),
        "lzw.tiff": encode(photo, "TIFF", compression="tiff_lzw"),
        "deflate-alpha.tif": encode(with_alpha, "TIFF", compression="tiff_adobe_deflate"),
        "jpeg.tiff": encode(photo, "TIFF", compression="jpeg", quality=90),
        "jpeg2000.tiff": with_tiff_compression(encode(photo, "TIFF", compression="tiff_lzw"), 34712),
        "cut.webp": webp[: len(webp) // 2],
    }
