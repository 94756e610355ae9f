"""The preprocess worker leaves nothing behind in the temporary folder when it is stopped."""

from __future__ import annotations

from pathlib import Path

from jobs.launch.local import spawn_worker, stop_all
from kafka_io.groups import live_groups
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until


def test_a_stopped_preprocess_worker_removes_its_faust_data_folder(
    settings: KafkaSettings, topics: Topics, tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    worker = spawn_worker(
        "preprocess",
        ["preprocess"],
        bootstrap_servers=settings.bootstrap_servers,
        namespace=topics.namespace,
        repository=model_repository,
        log_path=tmp_path / "preprocess.log",
        extra_env={"TMPDIR": str(scratch)},
    )
    try:
        wait_until(
            lambda: list(scratch.glob("nearline-faust-*")),
            60,
            "the worker's data folder",
            every_s=0.2,
            meanwhile=worker.check_alive,
        )
        # faust started up before the stop, as a real worker would be: it has joined its group
        group = topics.preprocess_app_id
        wait_until(
            lambda: live_groups(settings, [group]),
            60,
            f"the worker in its group {group}",
            until=lambda live: live == {group},
            every_s=0.2,
            meanwhile=worker.check_alive,
        )
    finally:
        stop_all([worker])
    assert worker.process.returncode is not None
    assert list(scratch.glob("nearline-faust-*")) == []
