"""What `nearline run` starts where no cluster is named: the embedded broker (Tansu, memory-only),
the model's kept results cache produced into it (kept_cache.py), and a preprocess and a GPU worker
of its own; and how it ends them once every result is read."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from contextlib import ExitStack, suppress
from pathlib import Path

from jobs.launch.kept_cache import keep_cache, restore_cache
from jobs.launch.local import WorkerProcess, start_pipeline_workers, stop_all
from jobs.liveness import WorkersGoneError
from jobs.submit import pipeline_topics
from kafka_io.broker import EmbeddedBroker
from kafka_io.settings import KafkaSettings
from kafka_io.topics import ensure_topics
from kafka_io.topology import Topics
from results.outcome import JobFold


class EmbeddedPipeline:
    """Started by `start` into an ExitStack that stops whatever is left however the run ends;
    `finish` ends it at once once every result is read, keeping the results cache for the next run."""

    def __init__(self, model: str, topics: Topics, log: Callable[[str], None]) -> None:
        self.model, self.topics, self._log = model, topics, log
        self.workdir = Path(tempfile.mkdtemp(prefix="nearline-run-"))
        self.broker: EmbeddedBroker | None = None
        self.workers: list[WorkerProcess] = []

    def start(self, stack: ExitStack, repository: Path, namespace: str, worker_args: tuple[str, ...]) -> KafkaSettings:
        broker = self.broker = EmbeddedBroker.start(self.workdir / "broker.log")
        stack.callback(broker.stop)
        settings = KafkaSettings(broker.bootstrap_servers)
        ensure_topics(settings, pipeline_topics(self.topics, self.model))
        restore_cache(settings, self.topics, self.model, self._log)  # before a worker looks anything up
        self.workers = start_pipeline_workers(
            self.model,
            bootstrap_servers=broker.bootstrap_servers,
            namespace=namespace,
            repository=repository,
            logs=self.workdir,
            # the embedded broker is ours and each worker is alone in its group: both take
            # their partitions without a join (Tansu holds a join for a second or more)
            gpu_args=("--sole-consumer", *worker_args),
            preprocess_args=("--sole-consumer",),
            # their scratch (faust's data folder) goes with workdir, killed or not
            extra_env={"TMPDIR": str(self.workdir)},
        )
        # with the broker gone a worker cannot leave its group or flush: no point waiting long
        stack.callback(lambda: stop_all(self.workers, 15.0 if broker.alive() else 3.0))
        self._log(f"embedded broker on {broker.bootstrap_servers}; worker logs in {self.workdir}")
        return settings

    def liveness(self, outcome: JobFold) -> None:
        """A watch_job watchdog: the broker or a worker gone stops the wait at once."""
        if self.broker is not None and not self.broker.alive():
            raise WorkersGoneError(f"the embedded broker exited (its log: {self.broker.log_path})")
        for w in self.workers:
            code = w.process.poll()
            if code is not None:
                raise WorkersGoneError(f"the {w.name} worker exited with code {code}; see its log {w.log_path}")

    def finish(self, settings: KafkaSettings) -> None:
        """Every result is read: the results cache kept for the next run, then the workers and the
        memory-only broker discarded with all it holds (a graceful stop, faust leaving its group,
        final commits, Tansu's shutdown, would only cost time), and the logs with them."""
        keep_cache(settings, self.topics, self.model, self._log)
        for w in self.workers:
            w.process.kill()
        for w in self.workers:
            with suppress(subprocess.TimeoutExpired):  # the stop_all callback deals with it
                w.process.wait(10)
        if self.broker is not None:
            self.broker.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)  # logs are kept only when something failed
