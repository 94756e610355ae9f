"""Avro's binary primitives read from bytes at a position, for the readers that skip fastavro on a
hot path (schemas/tensor_record_bytes.py, schemas/inference_result_bytes.py, schemas/raw_text_bytes.py),
and the one record of ours they all read, a Tensor. Each returns the value and
the position after it; a read past the end raises IndexError and a bad string UnicodeDecodeError,
which those readers turn into a TruncatedRecordError, as fastavro's errors are."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

V = TypeVar("V")


def read_map(data: bytes, p: int, value: Callable[[bytes, int], tuple[V, int]]) -> tuple[dict[str, V], int]:
    """An Avro map from p (blocks of string keys and `value`s, a zero count ending it); its end."""
    read: dict[str, V] = {}
    count, p = read_count(data, p)
    while count:
        for _ in range(count):
            key, p = read_string(data, p)
            read[key], p = value(data, p)
        count, p = read_count(data, p)
    return read, p


def read_long(data: bytes, p: int) -> tuple[int, int]:
    """Avro's int/long at p (zig-zag varint, low group first), and the position after it."""
    b = data[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    z, shift = b & 0x7F, 7
    while b >= 0x80:
        p += 1
        b = data[p]
        z |= (b & 0x7F) << shift
        shift += 7
    if shift > 70:  # more than the 10 bytes of a 64-bit long
        raise IndexError(f"a varint of {shift // 7} bytes")
    z &= 0xFFFFFFFFFFFFFFFF  # a 10th byte's high bits fall off, as in fastavro's 64-bit read
    return (z >> 1) ^ -(z & 1), p + 1


def read_length(data: bytes, p: int) -> tuple[int, int]:
    """A string's or bytes' length at p."""
    n = data[p]
    if not n & 0x81:  # a one-byte length of 0 to 63
        return n >> 1, p + 1
    n, p = read_long(data, p)
    if n < 0:
        raise IndexError(f"a negative length {n}")
    return n, p


def read_string(data: bytes, p: int) -> tuple[str, int]:
    n = data[p]
    if n & 0x81:
        n, p = read_length(data, p)
    else:
        n, p = n >> 1, p + 1
    if p + n > len(data):  # a slice would cut it short without a word: a reader that stops early must know
        raise IndexError(f"a string of {n} bytes with {len(data) - p} left")
    return data[p : p + n].decode(), p + n


def read_count(data: bytes, p: int) -> tuple[int, int]:
    """An array's or map's block count at p (0 ends it). A negative count is followed by the
    block's size in bytes (the spec allows writers that skip-index blocks): read, not needed."""
    n = data[p]
    if not n & 0x81:
        return n >> 1, p + 1
    n, p = read_long(data, p)
    if n < 0:
        _, p = read_long(data, p)
        n = -n
    return n, p


def read_tensor(data: bytes, p: int) -> tuple[str, str, list[int], int, int]:
    """A Tensor record (name, dtype, shape, data: as nested in tensor_record.avsc and
    inference_result.avsc) at p: its name, dtype,
    shape, the position of its data and the data's length (the data is not copied); its end is
    that position plus that length, which must be within `data`."""
    name, p = read_string(data, p)
    dtype, p = read_string(data, p)
    shape: list[int] = []
    n, p = read_count(data, p)
    while n:
        for _ in range(n):
            d, p = read_long(data, p)
            shape.append(d)
        n, p = read_count(data, p)
    size, p = read_length(data, p)
    if p + size > len(data):
        raise IndexError(f"tensor data of {size} bytes with {len(data) - p} left")
    return name, dtype, shape, p, size
