from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import PIL
import pytest
from PIL import Image

from model_repository.config import ImageSpec
from preprocess_app.image import (
    RESAMPLE,
    CorruptImageError,
    EmptyImageError,
    ImageTooLargeError,
    NotAnImageError,
    UnsupportedImageError,
    decode_image,
)
from tests.support.image_corpus import bad_and_odd_images, encode, real_photos, with_tiff_compression

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
        ("jpeg2000.tiff", UnsupportedImageError, "TIFF with compression 34712 \\(JPEG 2000\\) is not supported"),
        ("cut.webp", CorruptImageError, "corrupt"),
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


def test_the_crop_is_the_resized_image_s_centre() -> None:
    """Resizing only the cropped region gives what resizing the whole image and cropping gives,
    within a level of rounding, for photos and for odd shapes."""
    for path in real_photos()[:6]:
        photo = Image.open(path).convert("RGB")
        for size in (photo.size, (photo.width // 3, photo.height), (1000, 7), (7, 900), (225, 300), (100, 100)):
            image = photo.resize(size)
            scale = SPEC.resize / min(size)
            whole = image.resize(
                (max(224, round(size[0] * scale)), max(224, round(size[1] * scale))), RESAMPLE["bicubic"]
            )
            left, top = (whole.width - 224) // 2, (whole.height - 224) // 2
            expected = np.asarray(whole.crop((left, top, left + 224, top + 224))).transpose(2, 0, 1).astype(int)
            got = decode_image(encode(image, "PNG"), SPEC).astype(int)
            assert np.abs(got - expected).max() <= 2, (path.name, size)
            assert np.mean(got != expected) < 0.02, (path.name, size)


@pytest.mark.process
@pytest.mark.parametrize("size", [(100_000, 1), (1, 100_000)])
def test_a_one_pixel_strip_is_cropped_in_bounded_memory(size: tuple[int, int]) -> None:
    """A 100000x1 PNG is a few hundred bytes and far under the pixel cap, but its shorter side
    resized to 256 is 25,600,000 x 256 pixels (20 GB): that killed a preprocess worker on every
    redelivery. In a process limited to 3 GiB of address space it must decode to a crop."""
    strip = encode(Image.new("RGB", size, (10, 200, 30)), "PNG")
    assert len(strip) < 2000
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "from preprocess_app.image import decode_image\n"
        "from model_repository.config import ImageSpec\n"
        "crop = decode_image(sys.stdin.buffer.read(), ImageSpec())\n"
        "print(crop.shape, crop.reshape(3, -1).mean(axis=1).round().tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], input=strip, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().split() == ["(3,", "224,", "224)", "[10.0,", "200.0,", "30.0]"]


def test_this_pillow_decodes_webp_and_libtiff_compressions() -> None:
    from PIL import features

    assert features.check("webp") and features.check("libtiff")


def alpha_photo(name: str) -> Image.Image:
    """A real photo with a left-to-right alpha ramp (128 to 255): transparency must composite alike."""
    photo = Image.open(next(p for p in real_photos() if p.name == name)).convert("RGB")
    ramp = np.linspace(128, 255, photo.width, dtype=np.uint8)[None, :].repeat(photo.height, axis=0)
    photo.putalpha(Image.fromarray(ramp))
    return photo


# coffee: a confident label (chelsea, a cat, sits between "tiger cat" and "Egyptian cat", and lossy
# encodings flip it, as they would between two JPEG qualities)
@pytest.mark.parametrize("photo", ["coffee.png"])
def test_webp_and_compressed_tiff_decode_like_the_png_of_the_same_photo(photo: str, tmp_path: Path) -> None:
    from tests.support.references import torch_top5

    rgba = alpha_photo(photo)
    rgb = rgba.convert("RGB")
    files = {
        "png-rgba.png": encode(rgba, "PNG"),
        "png-rgb.png": encode(rgb, "PNG"),
        "lossless-alpha.webp": encode(rgba, "WEBP", lossless=True),
        "lossy-alpha.webp": encode(rgba, "WEBP", quality=90),
        "lossy.webp": encode(rgb, "WEBP", quality=90),
        "lzw.tiff": encode(rgb, "TIFF", compression="tiff_lzw"),
        "deflate-alpha.tif": encode(rgba, "TIFF", compression="tiff_adobe_deflate"),
        "jpeg.tiff": encode(rgb, "TIFF", compression="jpeg", quality=90),
    }
    crops = {name: decode_image(data, SPEC) for name, data in files.items()}
    # lossless encodings give the PNG's pixels exactly, transparency composited alike
    for name, png in (("lossless-alpha.webp", "png-rgba.png"), ("deflate-alpha.tif", "png-rgba.png"),
                      ("lzw.tiff", "png-rgb.png")):  # fmt: skip
        assert np.array_equal(crops[name], crops[png]), name
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    paths = [tmp_path / name for name in files]
    top = {p.name: indices[0] for p, (indices, _) in zip(paths, torch_top5(paths), strict=True)}
    for name in ("lossy-alpha.webp",):
        assert top[name] == top["png-rgba.png"], (name, top)
    for name in ("lossy.webp", "jpeg.tiff"):
        assert top[name] == top["png-rgb.png"], (name, top)


@pytest.mark.parametrize(
    ("value", "said"), [(34712, "34712 (JPEG 2000)"), (50002, "50002 (JPEG XL)"), (9999, "9999 (unknown)")]
)
def test_a_tiff_compression_this_build_cannot_decode_is_unsupported_not_corrupt(value: int, said: str) -> None:
    photo = Image.open(real_photos()[0]).convert("RGB")
    data = with_tiff_compression(encode(photo, "TIFF", compression="tiff_lzw"), value)
    with pytest.raises(
        UnsupportedImageError,
        match=rf"^TIFF with compression {re.escape(said)} is not supported by this build$",
    ):
        decode_image(data, SPEC)


def test_an_unsupported_signature_is_named_and_a_cut_webp_is_still_corrupt() -> None:
    heic = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64
    with pytest.raises(UnsupportedImageError, match=r"^HEIC/HEIF is not supported by this build of Pillow$"):
        decode_image(heic, SPEC)
    photo = Image.open(real_photos()[0]).convert("RGB")
    for fmt, params in (("WEBP", {"quality": 90}),):
        data = encode(photo, fmt, **params)
        with pytest.raises(CorruptImageError, match="corrupt"):
            decode_image(data[: len(data) // 2], SPEC)
