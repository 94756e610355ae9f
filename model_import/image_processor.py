"""A Hugging Face `preprocessor_config.json` as nearline's image preprocessing: the geometry goes
to the preprocess worker (ImageSpec), the rescale and mean/std into the exported graph, which takes
uint8 pixels as EfficientNet's does. Pure: reads JSON, imports no framework.

Every key is either honoured, known to change nothing here, or refused by name: a processor we
half-follow would give plausible, wrong labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from model_repository.config import ImageSpec


class ImageProcessorError(ValueError):
    """A preprocessor config nearline cannot honour; the message names the key."""


@dataclass(frozen=True)
class PixelScaling:
    """What the graph does to uint8 pixels first: (x * rescale - mean) / std per channel."""

    rescale: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


# PIL resampling codes, as transformers stores them
RESAMPLE_CODES = {2: "bilinear", 3: "bicubic"}
HONOURED = {
    "do_resize",
    "size",
    "resample",
    "do_center_crop",
    "crop_size",
    "do_rescale",
    "rescale_factor",
    "do_normalize",
    "image_mean",
    "image_std",
    "do_convert_rgb",  # every image becomes RGB here anyway
}
NEUTRAL = {"image_processor_type", "feature_extractor_type", "processor_class", "_processor_class", "data_format"}


def read_image_processor(d: dict[str, Any]) -> tuple[ImageSpec, PixelScaling]:
    """ImageSpec and PixelScaling that reproduce the processor, or ImageProcessorError naming the key."""
    for key, value in d.items():
        if key in HONOURED or key in NEUTRAL or not value:
            continue
        raise ImageProcessorError(f"preprocessor_config.json: key {key!r} = {value!r} is not supported")
    if d.get("data_format", "channels_first") != "channels_first":
        raise ImageProcessorError(
            f"preprocessor_config.json: key 'data_format' = {d['data_format']!r} is not supported"
        )
    if not d.get("do_resize", True):
        raise ImageProcessorError("preprocessor_config.json: key 'do_resize' is false: images of any size cannot batch")
    resample = d.get("resample", 2)
    if resample not in RESAMPLE_CODES:
        raise ImageProcessorError(
            f"preprocessor_config.json: key 'resample' = {resample!r}: only 2 (bilinear) and 3 (bicubic)"
        )
    mode, resize = _size(d.get("size"))
    crop = resize
    if d.get("do_center_crop", False):
        crop = _square(d.get("crop_size"), "crop_size")
        if crop > resize:
            raise ImageProcessorError(f"preprocessor_config.json: key 'crop_size' = {crop} is larger than the resize")
    elif mode == "shorter_side":
        raise ImageProcessorError(
            "preprocessor_config.json: key 'do_center_crop' is false with size.shortest_edge: the images would "
            "keep their aspect ratios, and batches need one shape"
        )
    spec = ImageSpec(
        resize=resize,
        crop=crop,
        resize_mode=mode,
        resample=RESAMPLE_CODES[resample],  # type: ignore[arg-type]
        jpeg_draft=False,  # the processor decodes at full size; so do we, to give its pixels
    )
    rescale = float(d.get("rescale_factor", 1 / 255)) if d.get("do_rescale", True) else 1.0
    mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    if d.get("do_normalize", True):
        mean, std = _channels(d, "image_mean"), _channels(d, "image_std")
        if min(std) <= 0:
            raise ImageProcessorError(f"preprocessor_config.json: key 'image_std' = {list(std)} has a value <= 0")
    return spec, PixelScaling(rescale, mean, std)


def _size(size: Any) -> tuple[Literal["shorter_side", "exact"], int]:
    if isinstance(size, int):
        return "exact", size
    if isinstance(size, dict):
        if set(size) == {"height", "width"}:
            return "exact", _square(size, "size")
        if set(size) == {"shortest_edge"}:
            return "shorter_side", int(size["shortest_edge"])
    raise ImageProcessorError(
        f"preprocessor_config.json: key 'size' = {size!r}: supported are {{height, width}} (equal), "
        "{shortest_edge} with a centre crop, or one number"
    )


def _square(size: Any, key: str) -> int:
    if isinstance(size, int):
        return size
    if isinstance(size, dict) and set(size) == {"height", "width"} and size["height"] == size["width"]:
        return int(size["height"])
    raise ImageProcessorError(f"preprocessor_config.json: key {key!r} = {size!r}: only square sizes are supported")


def _channels(d: dict[str, Any], key: str) -> tuple[float, float, float]:
    value = d.get(key)
    if isinstance(value, int | float):
        value = [value] * 3
    if not isinstance(value, list) or len(value) != 3:
        raise ImageProcessorError(f"preprocessor_config.json: key {key!r} = {value!r}: three channel values needed")
    return (float(value[0]), float(value[1]), float(value[2]))
