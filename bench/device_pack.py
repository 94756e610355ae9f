"""Packing for the device carry: lzma (Python's own, so the GPU machine needs no xz binary). For
FP16 weights the bytes of each 2-byte word are split into two planes first (`*.planes.xz`): the
high bytes (sign and exponent) compress well once apart from the noisy low bytes, and MiniLM's
45 MB TorchScript packs to 37 MB instead of 40 MB. A binary packs better as it is (`*.xz`).

    python3 -m bench.device_pack unpack .device DEST   # every *.xz under .device, unpacked into DEST
"""

from __future__ import annotations

import argparse
import lzma
import shutil
from pathlib import Path

SUFFIX = ".xz"
PLANES_SUFFIX = ".planes.xz"


def pack(source: Path, target_dir: Path, fp16: bool = False) -> Path:
    """source packed into target_dir, as NAME.planes.xz for FP16 weights, else NAME.xz."""
    data = source.read_bytes()
    if fp16:
        even = len(data) - len(data) % 2
        data = data[0:even:2] + data[1:even:2] + data[even:]
    target = target_dir / (source.name + (PLANES_SUFFIX if fp16 else SUFFIX))
    target.write_bytes(lzma.compress(data, preset=6))
    return target


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
