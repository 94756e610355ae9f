"""InferenceResult records written straight from an executed batch's output matrix: the GPU
worker's hot path.

serde.encode builds a dict per record and walks the schema for it (~45 µs a result with
Tensor.from_array); here the parts that are the same for every row of a batch (model, batch id,
each output's name, dtype and shape, the batch's timestamps) are encoded once, and a row costs
its output bytes and its record's ids and maps, which the GPU worker takes from the TensorRecord's
bytes as they are (schemas/tensor_record_bytes.py). The only difference from serde.encode is that the
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
    if 0 <= n < 0x2000:  # lengths, sequence numbers, counts: most longs a result has, a lookup
        return _LAST[n << 1]
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


# The fields after the timestamps as a result that is not a generation has them: text "",
# finish_reason "", completion_tokens 0, cached_prompt_tokens 0 (their defaults). Every result this
# encoder writes ends with them; schemas/inference_result_bytes.py reads a result that does from
# its bytes.
NOT_GENERATION = b"\x00\x00\x00\x00"


def encoded_ids(job_id: str, record_id: str, seq: int) -> bytes:
    """A result's first three fields, as its TensorRecord's first three are written too."""
    return avro_string(job_id) + avro_string(record_id) + avro_long(seq)


def encoded_maps(attributes: Mapping[str, str], timestamps: Mapping[str, int]) -> bytes:
    """A result's attributes map and its record's own timestamps block, without the map's end:
    the batch's block follows (ResultEncoder.encode_batch)."""
    return avro_string_map(attributes) + avro_long_map_block(timestamps)


@dataclass(frozen=True)
class RowTensor:
    """One output tensor of every row: the name, dtype and row shape written once."""

    name: str
    rows: np.ndarray  # [B, ...], row i belongs to record i; little-endian C order on the wire

    def head(self) -> bytes:
        """The tensor's name, dtype, shape and its data's length: the same for every row."""
        dims = self.rows.shape[1:]
        shape = (avro_long(len(dims)) + b"".join(avro_long(d) for d in dims) + b"\x00") if dims else b"\x00"
        row_bytes = self.rows.dtype.itemsize * int(np.prod(dims, dtype=np.int64))
        return avro_string(self.name) + avro_string(self.rows.dtype.name) + shape + avro_long(row_bytes)

    def row_views(self) -> list[memoryview]:
        """Each row's bytes, little-endian, as views on one buffer (joined into results, never copied alone)."""
        data = np.ascontiguousarray(self.rows.astype(self.rows.dtype.newbyteorder("<"), copy=False))
        size = len(data)
        flat = data.reshape(-1).view(np.uint8).data
        n = len(flat) // size if size else 0
        return [flat[i * n : (i + 1) * n] for i in range(size)]


class ResultEncoder:
    """Encodes the results of one model's executed batches."""

    def __init__(self, model: str, model_version: str) -> None:
        self._header = MAGIC + fingerprint_of("nearline.InferenceResult")
        self._model = avro_string(model) + avro_string(model_version)

    def encode_batch(
        self,
        *,
        ids: Sequence[bytes],  # encoded_ids of each row's record
        outputs: Sequence[RowTensor],
        labels: Sequence[Sequence[str]] | None,
        batch_id: str,
        lengths: Sequence[int],
        padded_length: int,
        maps: Sequence[bytes],  # encoded_maps of each row's record
        batch_timestamps: Mapping[str, int],
    ) -> list[bytes]:
        """One encoded InferenceResult per row (an embedding's or a classifier's: the generation
        fields at their defaults); a row's timestamps are its own, then the batch's.

        A row is its record's encoded spans and its outputs' bytes between parts every row of the
        batch shares, joined once: ~1 µs a row, where encoding each field of it cost ~4."""
        size = len(ids)
        # between a row's ids and its first output: the model and the outputs' count
        lead = self._model + (avro_long(len(outputs)) if outputs else b"")
        heads = [t.head() for t in outputs]
        views = [t.row_views() for t in outputs]
        middle = avro_string(batch_id) + avro_long(size)
        tail = avro_long(padded_length)
        end = avro_long_map_block(batch_timestamps) + b"\x00" + NOT_GENERATION
        header = self._header
        out: list[bytes] = []
        for row in range(size):
            parts: list[bytes | memoryview] = [header, ids[row], lead]
            for head, rows in zip(heads, views, strict=True):
                parts += (head, rows[row])
            parts.append(b"\x00")  # end of outputs
            row_labels = labels[row] if labels is not None else ()
            if row_labels:
                parts += (avro_long(len(row_labels)), *map(avro_string, row_labels), b"\x00")
            else:
                parts.append(b"\x00")
            # two timestamps blocks, the row's own (in maps) then the batch's: a reader merges
            # blocks in order, so the batch's win a clash, as in {**own, **batch}
            parts += (middle, avro_long(lengths[row]), tail, maps[row], end)
            out.append(b"".join(parts))
        return out
