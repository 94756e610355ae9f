"""`nearline reprocess`: run a finished job's tensor records through another model version.

Preprocessing is not repeated: the job's tensor records are read back from tensors.<model> (the
job id travels in each record's header, so no record is decoded twice) and batched through the
chosen version in this process. The new results carry that version; readers prefer the newest
version of each record unless asked for one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from gpu_consumer.batcher import BatchSettings, default_window
from gpu_consumer.engines.factory import make_engine
from gpu_consumer.window_inference import handle_window
from jobs.registry import JobNotFoundError, find_job, job_lane
from kafka_io.clients import make_producer
from kafka_io.polling import records_in
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import ConsumedRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from model_repository.folders import load_model_config


def job_tensors(settings: KafkaSettings, topic: str, job_id: str) -> Iterator[ConsumedRecord]:
    """The job's tensor records in `topic` as they are read, never the whole job at once."""
    return (record for record in read_topics(settings, [topic]) if record.job_id == job_id)


def in_windows(sources: Iterable[ConsumedRecord], size: int) -> Iterator[list[ConsumedRecord]]:
    """Windows of about `size` records: counted by what each Kafka record holds (a text model's
    are packs, schemas/packs.py), closed once they reach it."""
    window: list[ConsumedRecord] = []
    held = 0
    for source in sources:
        window.append(source)
        held += source.records
        if held >= size:
            yield window
            window, held = [], 0
    if window:
        yield window


def reprocess(
    settings: KafkaSettings,
    topics: Topics,
    repository: Path,
    job_id: str,
    model: str,
    version: str | None,
    *,
    engine_kind: str = "auto",
    log: Callable[[str], None] = print,
) -> int:
    config = load_model_config(repository, model, version)
    # a live job's tensors are in the live lane's topic
    topic = topics.lane(topics.tensors(model), job_lane(find_job(settings, topics, job_id)))
    policy = BatchSettings(config.max_batch_size)
    engine, producer = None, None
    done = read = 0
    for window in in_windows(job_tensors(settings, topic, job_id), default_window(config.max_batch_size)):
        if engine is None or producer is None:  # started at the first record, so a missing job costs no warm-up
            engine = make_engine(config, engine_kind)
            engine.warmup()
            producer = make_producer(settings.with_client_id(f"reprocess-{job_id}"))
        out = handle_window(window, engine, config, topics, f"reprocess-{read}", policy)
        produce_all(producer, out)
        read += records_in(window)  # a pack counts as the records it holds
        done += len(out)
    if read == 0:
        raise JobNotFoundError(f"no tensor records of job {job_id} in {topic}")
    log(f"reprocessed {read} tensor records of {job_id} with {model}@{config.version}")
    return done
