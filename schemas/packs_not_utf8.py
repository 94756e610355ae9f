"""A RawTextPack whose records are whole but for strings that are not UTF-8, read record by record.

Avro strings are UTF-8, and fastavro refuses a pack holding one that is not: the whole pack was
one dead letter keyed to its first record, its valid records got neither a result nor a dead
letter of their own, and `dlq replay` sent the whole pack back to fail again. A foreign writer can
send such bytes (`ff fe`), so the pack is read here by hand: its envelope (job, model) must be
text, since every record shares it; a record whose id, text or attributes are not UTF-8 is
marked undecodable with why and its own bytes as a single RawText (the same Avro strings and
map, copied as they came), and the others are read as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from schemas.avro_bytes import read_count, read_length, read_long, read_map, read_string
from schemas.records import RawText
from schemas.result_encoding import avro_long, avro_string
from schemas.serde import HEADER_LEN, MAGIC, fingerprint_of

Span = tuple[int, int]  # [start, end) of one item's bytes


@cache
def _raw_text_header() -> bytes:
    return MAGIC + fingerprint_of(RawText.SCHEMA)


def read_not_utf8_pack(data: bytes, header: bytes) -> dict[str, Any] | None:
    """The fields of the RawTextPack in `data` (what fastavro gives, plus `undecodable`: index ->
    (why, the record alone)), where some record's strings are not UTF-8; None when the pack is
    malformed in any other way, or its envelope is not text (the caller's own error stands)."""
    if not data.startswith(header):
        return None
    try:
        job_id, p = read_string(data, HEADER_LEN)
        model, p = read_string(data, p)
        submitted_at, p = read_long(data, p)
        id_spans, p = _spans(data, p, _skip_string)
        n, p = read_length(data, p)
        seqs, p = data[p : p + n], p + n
        text_spans, p = _spans(data, p, _skip_string)
        map_spans, p = _spans(data, p, _skip_map)
    except (IndexError, UnicodeDecodeError):
        return None
    if p != len(data) or not len(id_spans) == len(text_spans) == len(map_spans) or len(seqs) != 8 * len(id_spans):
        return None
    record_ids: list[str] = []
    texts: list[str] = []
    attributes: list[dict[str, str]] = []
    undecodable: dict[int, tuple[str, bytes]] = {}
    for i, (id_span, text_span, map_span) in enumerate(zip(id_spans, text_spans, map_spans, strict=True)):
        record_id = data[id_span[0] : id_span[1]]
        bad = []
        try:
            rid, _ = read_string(data, id_span[0])
        except UnicodeDecodeError as exc:
            bad.append(f"its id is not UTF-8 ({exc.reason} at byte {exc.start})")
            rid = data[read_length(data, id_span[0])[1] : id_span[1]].decode("utf-8", "replace")
        try:
            text, _ = read_string(data, text_span[0])
        except UnicodeDecodeError as exc:
            bad.append(f"its text is not UTF-8 ({exc.reason} at byte {exc.start})")
            text = ""
        try:
            attrs, _ = read_map(data, map_span[0], read_string)
        except UnicodeDecodeError as exc:
            bad.append(f"its attributes are not UTF-8 ({exc.reason} at byte {exc.start})")
            attrs = {}
        record_ids.append(rid)
        texts.append(text)
        attributes.append(attrs)
        if bad:
            seq = int.from_bytes(seqs[8 * i : 8 * i + 8], "little", signed=True)
            alone = b"".join(
                (
                    _raw_text_header(),
                    avro_string(job_id),
                    record_id,
                    avro_long(seq),
                    avro_string(model),
                    data[text_span[0] : text_span[1]],
                    data[map_span[0] : map_span[1]],
                    avro_long(submitted_at),
                )
            )
            undecodable[i] = (f"record {rid!r} of the pack cannot be read: {'; '.join(bad)}", alone)
    if not undecodable:
        return None  # every string is text: what fastavro refused is something else
    return {
        "job_id": job_id,
        "model": model,
        "submitted_at": submitted_at,
        "record_ids": record_ids,
        "seqs": seqs,
        "texts": texts,
        "attributes": attributes,
        "undecodable": undecodable,
    }


def _spans(data: bytes, p: int, skip: Callable[[bytes, int], int]) -> tuple[list[Span], int]:
    """The span of each item of the Avro array at p (blocks of items `skip` steps over), and its end."""
    spans: list[Span] = []
    count, p = read_count(data, p)
    while count:
        for _ in range(count):
            end = skip(data, p)
            spans.append((p, end))
            p = end
        count, p = read_count(data, p)
    return spans, p


def _skip_string(data: bytes, p: int) -> int:
    n, p = read_length(data, p)
    if p + n > len(data):
        raise IndexError(f"a string of {n} bytes with {len(data) - p} left")
    return p + n


def _skip_map(data: bytes, p: int) -> int:
    count, p = read_count(data, p)
    while count:
        for _ in range(count):
            p = _skip_string(data, _skip_string(data, p))
        count, p = read_count(data, p)
    return p
