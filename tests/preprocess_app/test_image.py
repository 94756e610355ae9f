from __future__ import annotations

import importlib.metadata

import numpy as np
import PIL
import pytest

from preprocess_app.image import (
    CorruptImageError,
    EmptyImageError,
    ImageTooLargeError,
    NotAnImageError,
    decode_image,
)
from schemas.model_config import ImageSpec
from tests.image_corpus import bad_and_odd_images, real_photos

SPEC = ImageSpec()


@pytest.fixture(scope="module")
def corpus() -> dict[str, bytes]:
    return bad_and_odd_images()


def test_pil_in_this_environment_is_pillow_simd() -> None:
    assert importlib.metadata.version("pillow-simd") == PIL.__version__
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("Pillow")
    files = {str(f) for f in importlib.metadata.distribution("pillow-simd").files or []}
    assert "PIL/__init__.py" in files


@pytest.mark.parametrize(
    ("name", "error", "reason"),
    [
        ("truncated.jpg", CorruptImageError, "truncated"),
        ("zero.jpg", EmptyImageError, "zero-byte"),
        ("text.jpg", NotAnImageError, "not a recognised image format"),
        ("bomb.png", ImageTooLargeError, "30000x30000 PNG is 900 Mpx, over the 64 Mpx cap"),
    ],
)
def test_bad_images_are_refused_with_a_specific_reason(
    corpus: dict[str, bytes], name: str, error: type[Exception], reason: str
) -> None:
    with pytest.raises(error, match=reason):
        decode_image(corpus[name], SPEC)


def mean_rgb(crop: np.ndarray) -> list[int]:
    return [round(float(c)) for c in crop.reshape(3, -1).mean(axis=1)]


def test_every_mode_becomes_correct_rgb(corpus: dict[str, bytes]) -> None:
    cmyk = decode_image(corpus["cmyk.jpg"], SPEC)
    assert np.allclose(mean_rgb(cmyk), [200, 30, 30], atol=6)  # not inverted, not washed out
    grey16 = decode_image(corpus["grey16.png"], SPEC)
    assert mean_rgb(grey16) == [156, 156, 156]  # 40000 >> 8, not clipped to white
    palette = decode_image(corpus["palette-transparent.png"], SPEC)
    left, right = palette[:, :, :100], palette[:, :, -100:]
    assert mean_rgb(left) == [255, 255, 255]  # transparent red index: composited on the white background
    assert mean_rgb(right) == [0, 0, 255]
    gif = decode_image(corpus["animated.gif"], SPEC)
    assert mean_rgb(gif) == [255, 0, 0]  # the first frame


def test_exif_orientation_is_applied(corpus: dict[str, bytes]) -> None:
    crop = decode_image(corpus["exif-rotated.jpg"], SPEC)
    # Stored: black left, white right. Orientation 6 shows it rotated 90 degrees clockwise:
    # black on top, white at the bottom.
    top, bottom = crop[:, :50, :], crop[:, -50:, :]
    assert max(mean_rgb(top)) < 20 and min(mean_rgb(bottom)) > 235


def test_real_photos_give_model_sized_uint8_crops() -> None:
    for path in real_photos():
        crop = decode_image(path.read_bytes(), SPEC)
        assert crop.shape == (3, 224, 224) and crop.dtype == np.uint8, path
        assert crop.std() > 1, path  # an actual picture, not a blank
