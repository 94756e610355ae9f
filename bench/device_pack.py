"""Packing for the device carry: lzma (Python's own, so the GPU machine needs no xz binary). For
FP16 weights the bytes of each 2-byte word are split into two planes first (`*.planes.xz`): the
high bytes (sign and exponent) compress well once apart from the noisy low bytes, and MiniLM's
45 MB TorchScript packs to 37 MB instead of 40 MB. A binary packs better as it is (`*.xz`).

    python3 -m bench.device_pack unpack .device DEST   # every *.xz under .device, unpacked into DEST

Packing runs here, before a device call or a dry run: each packed file is kept in the per-user
cache (~/.cache/nearline/device/) by its source's sha256, so the same binary or model is packed
once (Tansu's 39 MB take about 20 s, SmolLM2's 94 MB GGUF about a minute, on two cores).
"""

from __future__ import annotations

import argparse
import hashlib
import lzma
import os
import shutil
from pathlib import Path

SUFFIX = ".xz"
PLANES_SUFFIX = ".planes.xz"


def pack(source: Path, target_dir: Path, fp16: bool = False) -> Path:
    """source packed into target_dir, as NAME.planes.xz for FP16 weights, else NAME.xz."""
    target = target_dir / (source.name + (PLANES_SUFFIX if fp16 else SUFFIX))
    shutil.copyfile(packed(source, fp16), target)
    return target


def packed(source: Path, fp16: bool = False) -> Path:
    """The cached packed file of source (packed now if the cache has none for its content)."""
    from model_repository.folders import user_cache

    data = source.read_bytes()
    suffix = PLANES_SUFFIX if fp16 else SUFFIX
    cached = user_cache() / "device" / f"{source.name}.{hashlib.sha256(data).hexdigest()[:16]}{suffix}"
    if cached.is_file():
        return cached
    if fp16:
        even = len(data) - len(data) % 2
        data = data[0:even:2] + data[1:even:2] + data[even:]
    cached.parent.mkdir(parents=True, exist_ok=True)
    scratch = cached.with_name(f".{cached.name}.{os.getpid()}")
    scratch.write_bytes(lzma.compress(data, preset=6))
    scratch.replace(cached)  # whole or absent: a run stopped while packing leaves no half file there
    return cached


def unpack(source: Path, target: Path) -> None:
    data = lzma.decompress(source.read_bytes())
    target.write_bytes(data if not source.name.endswith(PLANES_SUFFIX) else interleave(data))


def interleave(planes: bytes) -> bytes:
    half = len(planes) // 2
    data = bytearray(len(planes))
    data[0 : 2 * half : 2] = planes[:half]
    data[1 : 2 * half : 2] = planes[half : 2 * half]
    data[2 * half :] = planes[2 * half :]
    return bytes(data)


def unpack_tree(carry: Path, dest: Path) -> None:
    """A copy of `carry` in `dest` with every packed file unpacked: the carry itself stays as it
    came, so a later carry from the same checkout is not grown by unpacked models."""
    for path in sorted(carry.rglob("*")):
        if not path.is_file():
            continue
        target = dest / path.relative_to(carry)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.name.endswith(SUFFIX):
            suffix = PLANES_SUFFIX if path.name.endswith(PLANES_SUFFIX) else SUFFIX
            unpack(path, target.with_name(path.name[: -len(suffix)]))
        else:
            shutil.copy2(path, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["unpack"])
    parser.add_argument("carry", type=Path)
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    unpack_tree(args.carry, args.dest)


if __name__ == "__main__":
    main()
