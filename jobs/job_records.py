"""Which records a job submission holds, by id (results/submitted.py): what the error file lists
when a record has no result, and how an OpenAI batch job's records group into its requests. Read
from the job's raw topic (every stage after it may have skipped a record, or not reached it yet),
or, for `nearline run`, whose broker is gone at the end, from its input again."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from jobs.job_input import JobInput
from jobs.registry import job_lane
from kafka_io.reading import read_topics
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from producers import InputError
from results.submitted import Submitted
from schemas import Job, RawImage, SerdeError, decode
from schemas.packs import kind_of, read_raw_text_pack


def submitted_from_topic(settings: KafkaSettings, topics: Topics, job: Job) -> list[Submitted]:
    """The submission's records, in input order, from its raw topic (its lane's raw.text or raw.image).
    A record produced twice (a retried submit) is listed once."""
    raw = topics.lane(topics.raw_image if job.kind == "image" else topics.raw_text, job_lane(job))
    found: dict[str, Submitted] = {}
    for msg in read_topics(settings, [raw]):
        if msg.job_id != job.job_id or msg.submission not in (None, job.submission):
            continue
        for record in _records_in(msg.value):
            found.setdefault(record.record_id, record)
    return sorted(found.values(), key=lambda r: r.seq)


def _records_in(value: bytes) -> Iterable[Submitted]:
    try:
        if kind_of(value) == "RawTextPack":
            pack = read_raw_text_pack(value)
            return [
                Submitted(rid, int(seq), attrs)
                for rid, seq, attrs in zip(pack.record_ids, pack.seqs, pack.attributes, strict=True)
            ]
        image = decode(value, RawImage)
        return [Submitted(image.record_id, image.seq, dict(image.attributes))]
    except SerdeError:
        return []  # not a record of ours: the preprocess worker dead-letters it, under no id


def submitted_from_input(source: JobInput) -> Iterator[Submitted]:
    """The records a submit of `source` produced, numbered as it numbered them: its valid records
    in input order (what is invalid now was skipped then, or refused the job)."""
    seq = 0
    for item in source.read():
        if isinstance(item, InputError):
            continue
        yield Submitted(item.record_id, seq, dict(item.attributes))
        seq += 1
