"""Image preprocessing as pure functions: encoded image bytes in, a uint8 CHW crop out.

decode -> guard -> (JPEG: DCT-domain downscale) -> EXIF orientation -> RGB -> resize the shorter
side and centre crop, in one step that resizes only the cropped region. The crop travels as uint8
(150 KB at 224x224) and the model graph does the float normalisation, so the wire carries a
quarter of the bytes of float32.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from kafka_io.records import ConsumedRecord, OutRecord
from kafka_io.settings import Topics
from preprocess_app.models import ModelLookup
from preprocess_app.outputs import dead_out, tensor_out
from schemas import RawImage, SerdeError, Tensor, TensorRecord, decode, now_us
from schemas.model_config import ImageSpec, ModelError, ModelNotFoundError

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


def open_checked(data: bytes, spec: ImageSpec) -> Image.Image:
    """Open from the header only, refusing what is empty, not an image, or too many pixels to decode."""
    if not data:
        raise EmptyImageError("zero-byte file: no image data")
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise NotAnImageError(f"not a recognised image format ({len(data)} bytes, starting {data[:8]!r})") from None
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
        # resize target: a 4K JPEG decodes ~6x faster (shared/docs/models.md).
        image.draft("RGB", (spec.resize, spec.resize))
    try:
        image.load()  # for animations: the first frame
        image = ImageOps.exif_transpose(image)
        image = to_rgb(image, spec.background)
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise CorruptImageError(f"truncated or corrupt {image.format or 'image'}: {exc}") from None
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
    sources: Sequence[ConsumedRecord], models: ModelLookup, topics: Topics, map_fn: Mapper = map
) -> list[OutRecord]:
    """Decode a batch of raw.image records. A bad image becomes a dead letter with its reason; the
    rest go on. `map_fn` may be a thread pool's map: Pillow releases the GIL while it decodes."""
    started = now_us()
    out: list[OutRecord] = []
    work: list[tuple[ConsumedRecord, RawImage, ImageSpec, str, str]] = []
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
        pixels = cfg.input_for("pixels")
        assert pixels is not None
        work.append((src, raw, cfg.image, cfg.version, pixels.name))

    def attempt(item: tuple[ConsumedRecord, RawImage, ImageSpec, str, str]) -> np.ndarray | ImageError:
        try:
            return decode_image(item[1].image, item[2])
        except ImageError as exc:
            return exc

    for (src, raw, _, version, input_name), result in zip(work, map_fn(attempt, work), strict=True):  # type: ignore[arg-type]
        if isinstance(result, ImageError):
            out.append(dead_out(type(result)(f"{raw.source}: {result}"), src, topics, raw))
            continue
        record = TensorRecord(
            job_id=raw.job_id,
            record_id=raw.record_id,
            seq=raw.seq,
            model=raw.model,
            model_version=version,
            tensors=(Tensor.from_array(input_name, result),),
            attributes={**raw.attributes, "source": raw.source},
            timestamps={"submitted": raw.submitted_at, "preprocess_start": started, "preprocess_end": now_us()},
        )
        out.append(tensor_out(topics, record, src, raw))
    return out
