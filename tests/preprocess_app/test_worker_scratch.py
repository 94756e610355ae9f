"""The preprocess worker leaves nothing behind in the temporary folder when it is stopped."""

from __future__ import annotations

import time
from pathlib import Path

from jobs.launch.local import spawn_worker, stop_all
from kafka_io.settings import KafkaSettings, Topics
from tests.support.tiny_model import TinyModel


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
        deadline = time.monotonic() + 60
        while not list(scratch.glob("nearline-faust-*")):  # the worker made its data folder
            worker.check_alive()
            assert time.monotonic() < deadline, "the worker made no data folder in 60 s"
            time.sleep(0.2)
        time.sleep(2.0)  # let faust start up before the stop, as a real worker would be
    finally:
        stop_all([worker])
    assert worker.process.returncode is not None
    assert list(scratch.glob("nearline-faust-*")) == []
