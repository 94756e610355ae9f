"""Workers follow cancellations from the jobs topic (kafka_io/cancellations.py). A trial, on Apache Kafka:
its brokers auto-create a missing topic a client asks about, uncompacted and with a 1 MB limit, where
Tansu makes it another way; a worker that started first must neither lose the cancels nor spoil the topic."""

from __future__ import annotations

import time

from kafka_io.cancellations import Cancellations
from kafka_io.records import job_record
from kafka_io.settings import KafkaSettings, Topics
from kafka_io.tables import put_row
from kafka_io.topics import jobs_topic
from schemas import Job, encode


def test_a_worker_started_before_the_jobs_topic_exists_sees_a_cancel(settings: KafkaSettings, topics: Topics) -> None:
    cancellations = Cancellations(settings, topics).start()  # no jobs topic yet: the first submit makes it
    try:
        time.sleep(1)  # the follower has found no topic and waits to ask again
        job = Job("j1", "tiny", "in.txt", "text", 3, 100, cancelled_at=200, submission=100)
        put_row(settings, jobs_topic(topics), job.job_id, encode(job))
        headers = job_record("x", b"", "j1", "r1", 100).headers
        deadline = time.monotonic() + 30  # a bound on a wait, not a timing: it normally takes ~2 s
        while not cancellations.skips(headers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cancellations.skips(headers)
        assert not cancellations.skips(job_record("x", b"", "j2", "r1", 100).headers)
    finally:
        cancellations.close()
