"""The preprocess worker in the shape every worker has (runtime/service.py: serve): opened (its
topics, its scratch folder, the faust app), run under faust's worker until `stop` is set, closed.
faust runs the loop (the design's runtime for this stage); the signals are serve's, and setting
`stop` asks faust to stop as its own handlers would (faust_patches.py: stop_when)."""

from __future__ import annotations

import logging
import tempfile
from functools import partial
from pathlib import Path
from typing import Self

import faust

from kafka_io.clients import check_reachable
from kafka_io.faust_auth import faust_credentials, faust_refusal
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics, jobs_topic, lanes
from kafka_io.topology import Topics
from preprocess_app.app import PreprocessSettings, create_app
from preprocess_app.faust_patches import stop_when
from preprocess_app.metrics import PreprocessMetrics, preprocess_metrics
from preprocess_app.outage_log import BrokerWait, OncePerCause, quiet_root_handlers
from runtime.heap import settle_heap
from runtime.service import Stop, serve


def run_worker(settings: KafkaSettings, topics: Topics, repository: Path, worker: PreprocessSettings) -> None:
    """Run the preprocess worker until SIGTERM/SIGINT; with `worker.metrics`, serve Prometheus
    metrics there. `worker.sole_consumer` takes every partition without a group join
    (faust_patches.py: take_every_partition): only for a worker known to be its group's one
    member, the embedded `nearline run`'s."""
    faust_credentials(settings.extra)  # settings faust cannot apply: refused before anything starts
    metrics = preprocess_metrics(worker.metrics)
    serve(lambda: PreprocessWorker(settings, topics, repository, worker, metrics), partial(check_reachable, settings))


class PreprocessWorker:
    def __init__(
        self,
        settings: KafkaSettings,
        topics: Topics,
        repository: Path,
        worker: PreprocessSettings,
        metrics: PreprocessMetrics,
    ) -> None:
        self.settings, self.topics, self.repository = settings, topics, repository
        self.worker, self.metrics = worker, metrics

    def __enter__(self) -> Self:
        # faust keeps table state in its data folder; this worker has no tables, so the folder is
        # scratch, removed however the worker ends: by __exit__, or here if opening fails
        self.datadir = tempfile.TemporaryDirectory(prefix="nearline-faust-")
        try:
            self.runner = self._runner(Path(self.datadir.name))
        except BaseException:
            self.datadir.cleanup()
            raise
        settle_heap()  # the tokenizers and faust's app: never scanned by the collector again
        return self

    def _runner(self, datadir: Path) -> QuietWorker:
        topics = self.topics
        raws = [s for t in (topics.raw_text, topics.raw_image) for s in lanes(topics, TopicSpec(t))]
        ensure_topics(self.settings, [*raws, TopicSpec(topics.dead_letters), jobs_topic(topics)])
        wait = BrokerWait(self.settings)
        app = create_app(self.settings, topics, self.repository, datadir, self.worker, wait, self.metrics)
        runner = QuietWorker(app, loglevel="WARNING", quiet=True)
        runner.log_filter = OncePerCause(wait)
        # faust's terminal spinner sets the root logger to DEBUG so it can spin on every record: each
        # aiokafka debug call then builds a LogRecord (about 6% of this worker's CPU per event)
        runner.spinner = None
        return runner

    def run(self, stop: Stop) -> None:
        stop_when(self.runner, stop)
        try:
            self.runner.execute_from_commandline()
        except SystemExit as exit:
            # Kafka said no mid-run (an ACL revoked): the worker exits with the refusal's code
            # like every other, not as a crash to restart into the same refusal
            refused = faust_refusal(self.runner.crash_reason, self.settings.principal)
            if refused is not None:
                raise refused from None
            if exit.code not in (0, None):
                raise

    def __exit__(self, *exc: object) -> None:
        self.datadir.cleanup()


class QuietWorker(faust.Worker):
    """faust's worker, whose log holds one line per cause a minute in a broker outage (preprocess_app/outage_log.py)."""

    log_filter: OncePerCause | None = None

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        super().on_setup_root_logger(logger, level)
        if self.log_filter is not None:
            quiet_root_handlers(self.log_filter)
