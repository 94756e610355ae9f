"""A GPU worker keeps working across a restart of the embedded broker, which loses all its data."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.launch.local import start_pipeline_workers, stop_all
from jobs.launch.runner import watch_job
from jobs.submit import JobInput, submit
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import KafkaSettings, Topics
from tests.jobs.pipeline import feed_tensors
from tests.tiny_model import TinyModel


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_both_workers_recover_from_a_broker_restart_that_lost_everything(
    tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("restart")
    pre, gpu = start_pipeline_workers(
        "tiny",
        bootstrap_servers=broker.bootstrap_servers,
        namespace=topics.namespace,
        repository=model_repository,
        logs=tmp_path,
    )

    def check() -> None:
        gpu.check_alive()
        pre.check_alive()

    try:
        feed_tensors(settings, topics, "job-before", 10)
        before, _ = watch_job(settings, topics, "job-before", 10, check=check, timeout_s=120)
        assert len(before.results) == 10

        broker.stop()
        broker = EmbeddedBroker.start(tmp_path / "broker2.log", port=broker.port)  # empty: no topics, no groups
        feed_tensors(settings, topics, "job-after", 10)
        after, _ = watch_job(settings, topics, "job-after", 10, check=check, timeout_s=240)
        assert sorted(after.results) == [f"r{i}" for i in range(10)]
        # and a text job through both stages
        texts = tmp_path / "texts.txt"
        texts.write_text("".join(f"sentence number {i}\n" for i in range(25)))
        report = submit(settings, topics, JobInput(texts, "text"), "tiny")
        text_job, _ = watch_job(settings, topics, report.job_id, 25, check=check, timeout_s=240)
        assert len(text_job.results) == 25
    finally:
        stop_all([gpu, pre])
        broker.stop()
