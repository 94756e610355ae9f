"""Workers follow cancellations from the jobs topic (kafka_io/cancellations.py). A trial, on Apache Kafka:
its brokers auto-create a missing topic a client asks about, uncompacted and with a 1 MB limit, where
Tansu makes it another way; a worker that started first must neither lose the cancels nor spoil the topic."""

from __future__ import annotations

from kafka_io.cancellations import Cancellations
from kafka_io.clients import make_admin
from kafka_io.records import job_record
from kafka_io.settings import KafkaSettings
from kafka_io.tables import put_row
from kafka_io.topics import jobs_topic
from kafka_io.topology import Topics
from schemas import Job, encode
from tests.support.waiting import wait_until


def test_a_worker_started_before_the_jobs_topic_exists_sees_a_cancel(settings: KafkaSettings, topics: Topics) -> None:
    cancellations = Cancellations(settings, topics).start()  # no jobs topic yet: the first submit makes it
    try:
        # the follower started first: it made the jobs topic itself (compacted, as the registry
        # makes it) before anything was written to it
        admin = make_admin(settings)
        wait_until(
            lambda: topics.jobs in admin.list_topics(timeout=10).topics, 30, "the follower's jobs topic", every_s=0.2
        )
        job = Job("j1", "tiny", "in.txt", "text", 3, 100, cancelled_at=200, submission=100)
        put_row(settings, jobs_topic(topics), job.job_id, encode(job))
        headers = job_record("x", b"", "j1", "r1", 100).headers
        wait_until(lambda: cancellations.skips(headers), 30, "the cancel seen", every_s=0.1)  # normally ~2 s
        assert not cancellations.skips(job_record("x", b"", "j2", "r1", 100).headers)
    finally:
        cancellations.close()
