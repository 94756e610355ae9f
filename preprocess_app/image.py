"""Image preprocessing as pure functions: encoded image bytes in, a uint8 CHW crop out.

decode -> guard -> (JPEG: DCT-domain downscale) -> EXIF orientation -> RGB -> resize the shorter
side and centre crop, in one step that resizes only the cropped region. The crop travels as uint8
(150 KB at 224x224) and the model graph does the float normalisation, so the wire carries a
quarter of the bytes of float32.
"""

from __future__ import annotations

import io
import re
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
from PIL import Image, ImageOps, TiffImagePlugin, UnidentifiedImageError

from kafka_io.records import NO_REUSE_HEADER, ConsumedRecord, OutRecord, header_of, with_reuse_keys
from kafka_io.topology import Topics
from model_repository.config import ImageSpec, ModelError, ModelNotFoundError
from preprocess_app.models import ModelLookup
from preprocess_app.outputs import dead_out, tensor_out
from preprocess_app.reuse import CachedModel, ReusedRecord, ReuseLookup, found, reused_result
from schemas import RawImage, SerdeError, Tensor, TensorRecord, decode, now_us
from schemas.attributes import attribute_text

RESAMPLE = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}

# Our cap (ImageSpec.max_pixels, per model) is checked on every open, from the header, before any
# pixel is decoded; Pillow's process-wide one would only fire at 89/179 Mpx and with a vaguer message.
Image.MAX_IMAGE_PIXELS = None


class ImageError(ValueError):
    """An image that cannot become a model input; the message says why."""


class EmptyImageError(ImageError):
    pass


class NotAnImageError(ImageError):
    pass


class ImageTooLargeError(ImageError):
    pass


class CorruptImageError(ImageError):
    pass


class UnsupportedImageError(ImageError):
    """A valid image in a format or compression this build of Pillow cannot decode: not corrupt."""


# Formats Pillow may lack a decoder for, by their signature: what the file is, said when it fails
# to open, rather than "not an image".
_SIGNATURES = (
    (re.compile(rb"RIFF....WEBP", re.DOTALL), "WebP"),
    (re.compile(rb"....ftyp(avif|avis)", re.DOTALL), "AVIF"),
    (re.compile(rb"....ftyp(heic|heix|hevc|heim|heis|mif1|msf1)", re.DOTALL), "HEIC/HEIF"),
    (re.compile(rb"\x00\x00\x00\x0cjP  \r\n\x87\n|\xff\x4f\xff\x51"), "JPEG 2000"),
    (re.compile(rb"\xff\x0a|\x00\x00\x00\x0cJXL \r\n\x87\n"), "JPEG XL"),
)
_TIFF_COMPRESSIONS = {34712: "JPEG 2000", 34887: "LERC", 50002: "JPEG XL", 33003: "Aperio JPEG 2000"}
_NO_DECODER = re.compile(r"decoder (\S+) not available")


def tiff_compression(data: bytes) -> int | None:
    """The Compression tag (259) of a classic TIFF's first image, from the bytes; None if unreadable."""
    order = {b"II*\x00": "<", b"MM\x00*": ">"}.get(data[:4])
    if order is None:
        return None
    try:
        (ifd,) = struct.unpack_from(order + "I", data, 4)
        (entries,) = struct.unpack_from(order + "H", data, ifd)
        for entry in range(ifd + 2, ifd + 2 + 12 * entries, 12):
            tag, kind = struct.unpack_from(order + "HH", data, entry)
            if tag == 259:
                return int(struct.unpack_from(order + ("H" if kind == 3 else "I"), data, entry + 8)[0])
    except struct.error:
        return None
    return None


def _tiff_name(compression: int) -> str:
    name = TiffImagePlugin.COMPRESSION_INFO.get(compression) or _TIFF_COMPRESSIONS.get(compression, "unknown")
    return f"{compression} ({name})"


def _unopenable(data: bytes) -> ImageError:
    """Why Pillow could not identify data: a format this build lacks, a corrupt TIFF, or not an image."""
    compression = tiff_compression(data)
    if compression is not None and compression not in TiffImagePlugin.COMPRESSION_INFO:
        return UnsupportedImageError(f"TIFF with compression {_tiff_name(compression)} is not supported by this build")
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return CorruptImageError("corrupt TIFF header: Pillow could not read its first image directory")
    for signature, name in _SIGNATURES:
        if signature.match(data):
            return UnsupportedImageError(f"{name} is not supported by this build of Pillow")
    return NotAnImageError(f"not a recognised image format ({len(data)} bytes, starting {data[:8]!r})")


def _undecodable(image: Image.Image, exc: Exception) -> ImageError:
    """Why a recognised image failed to decode: a decoder this build lacks (Pillow without libtiff or
    libwebp says "decoder libtiff not available"), else corruption."""
    missing = _NO_DECODER.search(str(exc))
    if image.format == "TIFF":
        compression = str(image.info.get("compression", "raw"))
        if missing:
            return UnsupportedImageError(f"TIFF with compression {compression} is not supported by this build")
    elif missing:
        return UnsupportedImageError(f"{image.format} is not supported by this build ({missing[1]} decoder missing)")
    return CorruptImageError(f"truncated or corrupt {image.format or 'image'}: {exc}")


def open_checked(data: bytes, spec: ImageSpec) -> Image.Image:
    """Open from the header only, refusing what is empty, not an image, or too many pixels to decode."""
    if not data:
        raise EmptyImageError("zero-byte file: no image data")
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise _unopenable(data) from None
    except (OSError, SyntaxError, ValueError) as exc:  # a header Pillow recognises but cannot parse
        raise CorruptImageError(f"corrupt image header: {exc}") from None
    width, height = image.size
    if width * height > spec.max_pixels:
        raise ImageTooLargeError(
            f"{width}x{height} {image.format} is {width * height / 1e6:.0f} Mpx, over the "
            f"{spec.max_pixels / 1e6:.0f} Mpx cap (checked from the header, not decoded)"
        )
    return image


def to_rgb(image: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    """Any Pillow mode as 8-bit RGB; transparency is composited on `background`."""
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        # 16-bit greyscale: keep the top 8 bits. convert("L") would clip everything above 255 to white.
        wide = np.asarray(image).astype(np.int64)
        return Image.fromarray((np.clip(wide, 0, 65535) >> 8).astype(np.uint8)).convert("RGB")
    if mode == "F":
        return Image.fromarray(np.clip(np.asarray(image), 0, 255).astype(np.uint8)).convert("RGB")
    if (mode == "P" and "transparency" in image.info) or mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        base = Image.new("RGBA", rgba.size, (*background, 255))
        return Image.alpha_composite(base, rgba).convert("RGB")
    return image.convert("RGB")  # L, 1, P, CMYK (Adobe-inverted handled by Pillow), YCbCr, LAB, HSV


def decode_image(data: bytes, spec: ImageSpec) -> np.ndarray:
    """Encoded image bytes -> uint8 array [3, crop, crop], or an ImageError saying why not."""
    image = open_checked(data, spec)
    if image.format == "JPEG" and spec.jpeg_draft:
        # Let libjpeg scale by 1/2, 1/4 or 1/8 in the DCT domain while keeping both sides >= the
        # resize target: a 4K JPEG decodes ~3.6x faster (docs/benchmarks.md, Image preprocessing).
        image.draft("RGB", (spec.resize, spec.resize))
    try:
        image.load()  # for animations: the first frame
        image = ImageOps.exif_transpose(image)
        image = to_rgb(image, spec.background)
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise _undecodable(image, exc) from None
    crop = image.resize((spec.crop, spec.crop), RESAMPLE[spec.resample], box=crop_box(image.size, spec))
    return np.ascontiguousarray(np.asarray(crop, dtype=np.uint8).transpose(2, 0, 1))


def crop_box(size: tuple[int, int], spec: ImageSpec) -> tuple[float, float, float, float]:
    """The region of a width x height image that becomes the crop once its shorter side (both
    sides, in "exact" mode) is resized to spec.resize: resizing only that region gives the
    resize-then-crop pixels (within one level of rounding) without the whole resized image, which
    for a 100000x1 strip (a 372-byte PNG, far under the pixel cap) would be 25,600,000 x 256
    pixels: 20 GB."""
    width, height = size
    if spec.resize_mode == "exact":  # both sides to `resize`, the aspect ratio not kept
        resized = (max(spec.crop, spec.resize), max(spec.crop, spec.resize))
    else:
        scale = spec.resize / min(width, height)
        resized = (max(spec.crop, round(width * scale)), max(spec.crop, round(height * scale)))
    left, top = (resized[0] - spec.crop) // 2, (resized[1] - spec.crop) // 2
    sx, sy = width / resized[0], height / resized[1]
    return (left * sx, top * sy, (left + spec.crop) * sx, (top + spec.crop) * sy)


Mapper = Callable[[Callable[[bytes], np.ndarray | ImageError], Iterable[bytes]], Iterator[np.ndarray | ImageError]]


def preprocess_images(
    sources: Sequence[ConsumedRecord],
    models: ModelLookup,
    topics: Topics,
    map_fn: Mapper = map,
    reuse: ReuseLookup | None = None,
) -> list[OutRecord]:
    """Decode a batch of raw.image records. A bad image becomes a dead letter with its reason; the
    rest go on. `map_fn` may be a thread pool's map: Pillow releases the GIL while it decodes.
    With `reuse`, an image whose result is in its model's cache gets it from there, undecoded
    (preprocess_app/reuse.py), and the rest carry their reuse key on."""
    started = now_us()
    out: list[OutRecord] = []
    work: list[tuple[ConsumedRecord, RawImage, ImageSpec, str, str]] = []
    keys: dict[int, bytes] = {}  # by position in work
    for src in sources:
        raw: RawImage | None = None
        try:
            raw = decode(src.value, RawImage)
            cfg = models(raw.model).config
            if cfg.image is None:
                raise ModelNotFoundError(f"model {raw.model!r} is for {cfg.task}, not for images")
        except (SerdeError, ModelError) as exc:
            out.append(dead_out(exc, src, topics, raw))
            continue
        cached = reuse(cfg) if reuse is not None else None
        if cached is not None:
            key = cached.keys.image(raw.image)
            if header_of(src.headers, NO_REUSE_HEADER) is None and _reused(cached, key, src, raw, topics, out):
                continue
            keys[len(work)] = key
        pixels = cfg.input_for("pixels")
        assert pixels is not None
        work.append((src, raw, cfg.image, cfg.version, pixels.name))

    def attempt(item: tuple[ConsumedRecord, RawImage, ImageSpec, str, str]) -> np.ndarray | ImageError:
        try:
            return decode_image(item[1].image, item[2])
        except ImageError as exc:
            return exc

    done = zip(work, map_fn(attempt, work), strict=True)  # type: ignore[arg-type]
    for i, ((src, raw, _, version, input_name), result) in enumerate(done):
        if isinstance(result, ImageError):
            out.append(dead_out(type(result)(f"{raw.source}: {result}"), src, topics, raw))
            continue
        attributes = _image_attributes(raw)
        record = TensorRecord(
            job_id=raw.job_id,
            record_id=raw.record_id,
            seq=raw.seq,
            model=raw.model,
            model_version=version,
            tensors=(Tensor.from_array(input_name, result),),
            attributes=attributes,
            timestamps={"submitted": raw.submitted_at, "preprocess_start": started, "preprocess_end": now_us()},
        )
        tensors = tensor_out(topics, record, src, raw)
        out.append(
            with_reuse_keys(tensors, [keys[i]]) if i in keys and tensors.topic != topics.dead_letters else tensors
        )
    return out


def _image_attributes(raw: RawImage) -> dict[str, str]:
    """What an image's result carries: its own attributes and the file it came from."""
    return {**raw.attributes, "source": attribute_text(raw.source)}


def _reused(
    cached: CachedModel, key: bytes, src: ConsumedRecord, raw: RawImage, topics: Topics, out: list[OutRecord]
) -> bool:
    """Write the image's result from the cache, if the cache holds one it may serve."""
    value = found(cached, [key])[0]
    if value is None:
        return False
    stamps = {"submitted": raw.submitted_at, "preprocess_start": now_us()}
    record = ReusedRecord(raw.job_id, raw.record_id, raw.seq, _image_attributes(raw), stamps)
    result = reused_result(value, cached.config, record, topics)
    if result is None:
        return False
    out.append(result)
    return True
