"""InferenceResult records written straight from an executed batch's output matrix: the GPU
worker's hot path.

serde.encode builds a dict per record and walks the schema for it (~45 µs a result with
Tensor.from_array); here the parts that are the same for every row of a batch (model, batch id,
each output's name, dtype and shape, the batch's timestamps) are encoded once, and a row costs
its ids, its output bytes and its own maps. The only difference from serde.encode is that the
timestamps map comes in two blocks, which the Avro spec allows: serde.decode and any Avro reader
read back the same InferenceResult (tested).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from schemas.serde import MAGIC, fingerprint_of

# A varint is written 14 bits (two bytes) at a time from tables: a microsecond timestamp takes
# 8 bytes, and a byte-at-a-time loop made its encoding the largest cost of a result.
_ONE = [bytes((z,)) for z in range(0x80)]
_PAIR = [bytes(((z & 0x7F) | 0x80, (z >> 7) | 0x80)) for z in range(0x4000)]  # more bytes follow
_LAST = [bytes(((z & 0x7F) | 0x80, z >> 7)) if z >= 0x80 else bytes((z,)) for z in range(0x4000)]


def avro_long(n: int) -> bytes:
    """Avro's int/long: zig-zag, then a base-128 varint, low group first."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return _ONE[z]
    parts = []
    while z >= 0x4000:
        parts.append(_PAIR[z & 0x3FFF])
        z >>= 14
    parts.append(_LAST[z])
    return b"".join(parts)


_KEYS: dict[str, bytes] = {}  # map keys repeat on every record: encoded once


def avro_string(s: str) -> bytes:
    b = s.encode()
    return avro_long(len(b)) + b


def _key(k: str) -> bytes:
    encoded = _KEYS.get(k)
    if encoded is None:
        encoded = avro_string(k)
        if len(_KEYS) < 1024:  # keys are a handful of stage names; never let odd ones grow this
            _KEYS[k] = encoded
    return encoded


def avro_string_map(m: Mapping[str, str]) -> bytes:
    if not m:
        return b"\x00"
    return avro_long(len(m)) + b"".join([_key(k) + avro_string(v) for k, v in m.items()]) + b"\x00"


def avro_long_map_block(m: Mapping[str, int]) -> bytes:
    """One map block without the end marker, so blocks can be joined (b"" for an empty map)."""
    if not m:
        return b""
    return avro_long(len(m)) + b"".join([_key(k) + avro_long(v) for k, v in m.items()])


@dataclass(frozen=True)
class RowTensor:
    """One output tensor of every row: the name, dtype and row shape written once."""

    name: str
    rows: np.ndarray  # [B, ...], row i belongs to record i; little-endian C order on the wire

    def head(self) -> bytes:
        dims = self.rows.shape[1:]
        shape = (avro_long(len(dims)) + b"".join(avro_long(d) for d in dims) + b"\x00") if dims else b"\x00"
        return avro_string(self.name) + avro_string(self.rows.dtype.name) + shape


class ResultEncoder:
    """Encodes the results of one model's executed batches."""

    def __init__(self, model: str, model_version: str) -> None:
        self._header = MAGIC + fingerprint_of("nearline.InferenceResult")
        self._model = avro_string(model) + avro_string(model_version)

    def encode_batch(
        self,
        *,
        ids: Sequence[tuple[str, str, int]],  # (job_id, record_id, seq) per row
        outputs: Sequence[RowTensor],
        labels: Sequence[Sequence[str]] | None,
        batch_id: str,
        lengths: Sequence[int],
        padded_length: int,
        attributes: Sequence[Mapping[str, str]],
        timestamps: Sequence[Mapping[str, int]],
        batch_timestamps: Mapping[str, int],
    ) -> list[bytes]:
        """One encoded InferenceResult per row; a row's timestamps are its own, then the batch's."""
        size = len(ids)
        tensors_head = avro_long(len(outputs)) if outputs else b""
        heads = [t.head() for t in outputs]
        # every row's bytes, as one contiguous little-endian buffer per output
        data = [np.ascontiguousarray(t.rows.astype(t.rows.dtype.newbyteorder("<"), copy=False)) for t in outputs]
        row_bytes = [d[0].nbytes if size else 0 for d in data]
        middle = avro_string(batch_id) + avro_long(size)
        tail = avro_long(padded_length)
        shared_ts = avro_long_map_block(batch_timestamps)
        out: list[bytes] = []
        for row, (job_id, record_id, seq) in enumerate(ids):
            parts = [
                self._header,
                avro_string(job_id),
                avro_string(record_id),
                avro_long(seq),
                self._model,
                tensors_head,
            ]
            for head, buf, n in zip(heads, data, row_bytes, strict=True):
                parts += (head, avro_long(n), buf[row].tobytes())
            parts.append(b"\x00")  # end of outputs
            row_labels = labels[row] if labels is not None else ()
            if row_labels:
                parts += (avro_long(len(row_labels)), *map(avro_string, row_labels), b"\x00")
            else:
                parts.append(b"\x00")
            parts += (middle, avro_long(lengths[row]), tail, avro_string_map(attributes[row]))
            # two map blocks, the row's own stamps then the batch's: a reader merges blocks in
            # order, so the batch's win a clash, as in {**own, **batch}
            parts += (avro_long_map_block(timestamps[row]), shared_ts, b"\x00")
            out.append(b"".join(parts))
        return out
