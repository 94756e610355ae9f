"""A job's outcome as readers see it: one entry per record, however often the topics repeat it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import orjson

from kafka_io.reading import read_topics
from kafka_io.records import REUSED_HEADER, ConsumedRecord, header_of
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from model_repository.versions import version_order
from results.kept_columns import KeptColumns
from results.timings import Timings
from results.usage import Usage, generation_usage
from schemas import DeadLetter, InferenceResult, RawImage, RawText, SerdeError, TensorRecord, decode
from schemas.attributes import REUSED_STAMP, attribute_values
from schemas.inference_result_bytes import read_result_head
from schemas.serde import decode_fields


class JobFold(Protocol):
    """What a wait folds a job's results and dead letters into, each record once: JobOutcome in
    memory, or results.spill.ResultSpill on disk for outputs as large as the job."""

    job_id: str

    @property
    def done(self) -> int: ...

    @property
    def failed(self) -> int: ...

    def add(self, messages: Iterable[ConsumedRecord], topics: Topics) -> object: ...

    def batch_sizes(self) -> dict[str, int]:
        """Executed batch id -> its size, over the results kept."""
        ...

    def completion_tokens(self) -> int:
        """The tokens the kept results' generations produced (0 for other models), reused ones not
        counted."""
        ...

    def reused_count(self) -> int:
        """Kept results written from the results cache (docs/reuse.md), counted in done; their
        batches are not in batch_sizes."""
        ...


@dataclass
class JobOutcome:
    """Results and dead letters of one job, keyed by record id. At-least-once delivery may
    repeat a record; the first copy wins, so every reader reports each record once."""

    job_id: str
    model_version: str | None = None  # only results of this version; None: the newest of each record
    submission: int | None = None  # only records of this submission (a job id resubmitted); None: any
    # False: keep each record's model version only, not its result (counts for status and jobs list)
    keep_results: bool = True
    keep_timings: bool = False  # each kept result's stage timestamps and batch, for profile and report
    results: dict[str, InferenceResult] = field(default_factory=dict)
    dead: dict[str, DeadLetter] = field(default_factory=dict)
    duplicates: int = 0
    versions: dict[str, str] = field(default_factory=dict)  # record id -> model version of the kept result
    timings: Timings = field(default_factory=Timings)
    usage: Usage | None = None  # counts each kept record's usage when set (status, jobs list)
    reused: set[str] = field(default_factory=set)  # record ids whose kept result came from the results cache

    @property
    def inferred(self) -> int:
        return len(self.versions)

    @property
    def done(self) -> int:
        return len(self.versions) + len(self.dead)

    @property
    def failed(self) -> int:
        return len(self.dead)

    def batch_sizes(self) -> dict[str, int]:
        reused = self.reused
        return {r.batch_id: r.batch_size for rid, r in self.results.items() if rid not in reused}

    def completion_tokens(self) -> int:
        reused = self.reused
        return sum(r.completion_tokens for rid, r in self.results.items() if rid not in reused)

    def reused_count(self) -> int:
        return len(self.reused)

    def add(self, messages: Iterable[ConsumedRecord], topics: Topics) -> int:
        """Fold consumed messages in; returns how many new records of this job they completed."""
        before = self.done
        for msg in messages:
            job_id = msg.job_id  # other jobs' records skipped by their header, without decoding them
            if job_id is not None and job_id != self.job_id:
                continue
            if msg.topic == topics.results:
                self._add_result(msg)
            elif msg.topic == topics.dead_letters:
                self._add_dead(msg.value)
        return self.done - before

    def _add_result(self, msg: ConsumedRecord) -> None:
        # written from the results cache by a preprocess worker: said by a header (docs/reuse.md)
        reused = header_of(msg.headers, REUSED_HEADER) is not None
        try:
            if self.keep_results or self.keep_timings or not self._count(msg, reused):
                fields = decode_fields(msg.value, InferenceResult)
                if self._add_fields(fields, reused) and self.usage is not None:
                    self.usage.add_fields(fields, reused)
        except SerdeError:
            return  # not ours to judge here; the results topic is written only by GPU workers

    def _count(self, msg: ConsumedRecord, reused: bool) -> bool:
        """A wait that keeps versions only: the result's leading fields and its submission header,
        without decoding the rest (~1.4 against ~8 us a MiniLM result). False: decode it whole
        (another writer schema, or a result written before results had the header)."""
        submission = None
        if self.submission is not None:
            submission = msg.submission
            if submission is None:
                return False
        head = read_result_head(msg.value)
        if head is None:
            return False
        if (
            submission in (None, self.submission)
            and self._keep(head.job_id, head.record_id, head.model_version, None, reused)
            and self.usage is not None
        ):
            self.usage.add_bytes(msg.value, reused)
        return True

    def _add_fields(self, fields: dict[str, Any], reused: bool = False) -> bool:
        if self.submission is not None and fields["timestamps"].get("submitted", self.submission) != self.submission:
            return False
        return self._keep(fields["job_id"], fields["record_id"], fields["model_version"], fields, reused)

    def _keep(
        self, job_id: str, record_id: str, version: str, fields: dict[str, Any] | None, reused: bool = False
    ) -> bool:
        """The rules: this job (and version, if one is asked for) only; the first copy wins unless
        a newer version comes; a result replaces a dead letter. fields: the decoded result, kept as
        results or timings ask. True when the record had no result kept before (its usage counts)."""
        if job_id != self.job_id or self.model_version not in (None, version):
            return False
        kept = self.versions.get(record_id)
        if not wins_over(version, kept):
            self.duplicates += kept == version
            return False
        self.dead.pop(record_id, None)  # a retried record that succeeded is not dead
        self.versions[record_id] = version
        if reused:
            self.reused.add(record_id)
        else:
            self.reused.discard(record_id)
        if fields is not None and (self.keep_results or self.keep_timings):
            result = InferenceResult.from_avro(fields)
            if self.keep_results:
                self.results[record_id] = result
            if self.keep_timings:
                self.timings.put(result)
        return kept is None

    def _add_dead(self, value: bytes) -> None:
        try:
            letter = decode(value, DeadLetter)
        except SerdeError:
            return
        if letter.job_id != self.job_id or letter.record_id is None or letter.record_id in self.versions:
            return
        if self.submission is not None and dead_submission(letter) not in (None, self.submission):
            return
        self.dead.setdefault(letter.record_id, letter)

    def ordered(self) -> list[InferenceResult | DeadLetter]:
        """Every record, results and dead letters, in the job's input order."""
        items: list[tuple[float, InferenceResult | DeadLetter]] = [(r.seq, r) for r in self.results.values()]
        items += [(dead_seq(d), d) for d in self.dead.values()]
        return [item for _, item in sorted(items, key=lambda x: x[0])]


def version_key(version: str) -> tuple[int, tuple[int, ...], str]:
    """The order versions are served in (model_repository/versions.py): numbers number by number, others before them."""
    return version_order(version)


def wins_over(version: str, kept: str | None) -> bool:
    """Which result of a record wins, for JobOutcome and ResultSpill alike: the first copy is kept,
    and a later result replaces it only with a newer model version (kept None: nothing is kept,
    or only a dead letter, which any result replaces)."""
    return kept is None or version_key(version) > version_key(kept)


def dead_seq(letter: DeadLetter) -> float:
    """Where a dead-lettered record stood in its job: the seq of the payload it failed on."""
    record_types: tuple[type[RawText] | type[RawImage] | type[TensorRecord], ...] = (RawText, RawImage, TensorRecord)
    for record_type in record_types:
        try:
            return decode(letter.payload, record_type).seq
        except SerdeError:
            continue
    return float("inf")  # undecodable payloads go last


def dead_submission(letter: DeadLetter) -> int | None:
    """The submission a dead-lettered record belonged to, from the payload it failed on."""
    try:
        return decode(letter.payload, TensorRecord).timestamps.get("submitted")
    except SerdeError:
        pass
    try:
        return decode(letter.payload, RawText).submitted_at
    except SerdeError:
        pass
    try:
        return decode(letter.payload, RawImage).submitted_at
    except SerdeError:
        return None


def read_outcome(
    settings: KafkaSettings,
    topics: Topics,
    job_id: str,
    model_version: str | None = None,
    *,
    keep_results: bool = True,
    keep_timings: bool = False,
    submission: int | None = None,
) -> JobOutcome:
    outcome = JobOutcome(
        job_id, model_version, submission=submission, keep_results=keep_results, keep_timings=keep_timings
    )
    outcome.add(read_topics(settings, [topics.results, topics.dead_letters]), topics)
    return outcome


def to_json(item: InferenceResult | DeadLetter, kept: KeptColumns | None = None) -> dict[str, Any]:
    """One output line: {"id", "job_id", "model", "<output>": [...]}, a generation's {"id",
    "job_id", "model", "text", "finish_reason", "usage": {...}}, or an "error" object; then the
    kept input columns, each under its own key (results/kept_columns.py)."""
    if isinstance(item, DeadLetter):
        dead: dict[str, Any] = {
            "id": item.record_id,
            "job_id": item.job_id,
            "model": item.model,
            "error": {"stage": item.stage, "type": item.error_type, "message": item.error},
        }
        if kept is not None:  # a dead letter does not carry the record's attributes
            dead.update(zip(kept.output_names(dead), [None] * len(kept.names), strict=True))
        return dead
    line: dict[str, Any] = {"id": item.record_id, "job_id": item.job_id, "model": item.model}
    if REUSED_STAMP in item.timestamps:  # written from the results cache (docs/reuse.md)
        line["reused"] = True
    if item.finish_reason:  # a generation: its text; its outputs (the completion's token ids) are not written
        line["text"] = item.text
        line["finish_reason"] = item.finish_reason
        line["usage"] = generation_usage(item)
        return finish_line(line, item.model_version, item.attributes, kept)
    arrays = item.arrays()
    if item.labels:  # a classifier: its top classes, best first
        line["labels"] = [
            {"label": label, "index": int(index), "score": round(float(score), 6)}
            for label, index, score in zip(item.labels, arrays["top_index"], arrays["top_score"], strict=True)
        ]
    else:
        for name, array in arrays.items():
            line[name] = rounded(array)
    return finish_line(line, item.model_version, item.attributes, kept)


def rounded(array: np.ndarray) -> np.ndarray:
    """An output as every JSON output writes it: float64 rounded to 8 decimals (float32 holds ~7
    significant digits; 8 decimals keep them all and halve the file), left an array so orjson
    writes it without a Python float per element. np.round's own steps, in place: its
    temporaries made it 2.8 against 0.7 us a 384-float row, the same values bit for bit."""
    out = np.array(array, np.float64)  # a copy, also of float64 input
    out *= 1e8
    np.rint(out, out=out)
    out /= 1e8
    return out if out.ndim else out[()]  # a scalar output as np.round gives it: a numpy float


def finish_line(
    line: dict[str, Any], model_version: str, attributes: Mapping[str, str], kept: KeptColumns | None
) -> dict[str, Any]:
    """A result's line after its outputs: the model version, the kept columns, the attributes."""
    line["model_version"] = model_version
    if kept is not None:
        values, attributes = kept.split(attributes)
        line.update(zip(kept.output_names(line), values.values(), strict=True))
    if attributes:  # the input line's, as the JSON values they were, for joining results back
        line["attributes"] = attribute_values(attributes)
    return line


def json_line(item: InferenceResult | DeadLetter, kept: KeptColumns | None = None) -> bytes:
    """to_json as one line of UTF-8. orjson writes a 384-float embedding ~6x faster than json (0.05 s
    against 0.33 s per 1,000 MiniLM results on the 2-core Xeon), which was most of writing a job's
    results; what it refuses (a lone surrogate in a string, an array type it lacks) json writes,
    escaped to ASCII so that any file takes the line."""
    return dumps_line(to_json(item, kept))


def dumps_line(line: dict[str, Any]) -> bytes:
    """A line object as one line of UTF-8 (see json_line)."""
    try:
        return orjson.dumps(line, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:
        return (json.dumps(line, separators=(",", ":"), default=_listed) + "\n").encode()


def _listed(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
