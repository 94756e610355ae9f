"""A real Prometheus scrapes real workers (GPU, preprocess, scheduler, notifier) through a scheduled job with
poison records, and the values it holds are the job's; the shipped dashboard's queries answer, and
the shipped "GPU worker absent" and "notifier down" alerts fire once those workers are stopped."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from jobs.launch.runner import WaitRules, watch_job
from jobs.registry import load_jobs
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord
from kafka_io.topics import TopicSpec, ensure_topics
from schemas import RawText, Tensor, TensorRecord, encode
from tests.support.inputs import example_lines, write_jsonl
from tests.support.pipeline import RunningPipeline
from tests.support.prometheus import Prometheus, free_port, rules_without_waits
from tests.support.promql import ALERTS, DASHBOARD, PROMETHEUS_SERIES, metric_names, promtool
from tests.support.records import tensor_rows
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until

RECORDS = 200
GPU, PREPROCESS, SCHEDULER = "nearline-gpu", "nearline-preprocess", "nearline-scheduler"
NOTIFIER = "nearline-notifier"


def eventually(
    prometheus: Prometheus,
    pipeline: RunningPipeline,
    query: str | Callable[[], object],
    expected: object,
    timeout_s: float = 120,
) -> None:
    """Wait until Prometheus' latest samples give `expected` (it scrapes every second), or fail
    showing the last value. A worker counts some things just after the job is seen complete
    (the preprocess worker once the broker confirms its outputs, the scheduler once submit
    returns), and the latest scrape may precede the completion: counters only move towards the
    job's figures, so a wrong figure never comes right."""
    read = query if callable(query) else lambda: prometheus.value(query)
    what = f"{query} = {expected}"
    wait_until(
        read, timeout_s, what, until=lambda value: value == expected, every_s=0.5, meanwhile=pipeline.check_workers
    )


def series(prometheus: Prometheus, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(r["metric"].get(k, "") for k in labels): float(r["value"][1]) for r in prometheus.query(expr)}


def poison(pipeline: RunningPipeline) -> None:
    """Three raw records the preprocess stage dead-letters and two tensor records the GPU stage does."""
    topics = pipeline.topics
    tensors = topics.tensors("tiny")
    ensure_topics(
        pipeline.settings,
        [TopicSpec(t) for t in (topics.raw_text, topics.raw_image, tensors, topics.results, topics.dead_letters)],
    )
    ids = np.array([101, 2000, 102])
    tensor = Tensor.from_array("input_ids", ids)
    produce_all(
        make_producer(pipeline.settings),
        [
            OutRecord(topics.raw_text, b"\x00garbage that is not avro"),  # NotSingleObjectError
            OutRecord(topics.raw_text, encode(RawText("poison", "blank-1", 0, "tiny", " \t\n ", 0))),  # ValueError
            OutRecord(topics.raw_text, encode(RawText("poison", "blank-2", 1, "tiny", "   ", 0))),  # ValueError
            OutRecord(  # TensorFormatError: a batch of one where one sequence is expected
                tensors,
                encode(
                    TensorRecord(
                        "poison", "shape", 2, "tiny", "1", (Tensor("input_ids", "int64", (1, 3), tensor.data),)
                    )
                ),
            ),
            OutRecord(  # TensorFormatError: float token ids
                tensors,
                encode(
                    TensorRecord(
                        "poison", "dtype", 3, "tiny", "1", (Tensor.from_array("input_ids", ids.astype(np.float32)),)
                    )
                ),
            ),
        ],
    )


def scheduled_job(pipeline: RunningPipeline, drop: Path) -> str:
    """Schedule the drop folder every minute, wait for the first tick's job, then remove the
    schedule so that no second tick adds records."""
    added = pipeline.cli(
        "schedule", "add", "metrics", "--cron", "* * * * *", "--input", str(drop / "*.jsonl"), "--model", "tiny"
    )
    assert added.returncode == 0, added.stderr

    def scheduled() -> list[str]:
        pipeline.check_workers()
        return [j.job_id for j in load_jobs(pipeline.settings, pipeline.topics).values() if j.schedule == "metrics"]

    jobs = wait_until(scheduled, 120, "the scheduler's first job of the schedule", every_s=1)
    assert pipeline.cli("schedule", "rm", "metrics").returncode == 0
    return jobs[0]


def job_tokens(pipeline: RunningPipeline, job_id: str) -> int:
    """Tokens of the job's tensor records, as the preprocess worker wrote them (before padding)."""
    lengths = {}
    for row in tensor_rows(pipeline.settings, pipeline.topics.tensors("tiny")):
        if row.job_id == job_id:
            lengths[row.record_id] = len(row.ids)
    assert len(lengths) == RECORDS
    return sum(lengths.values())


def firing(prometheus: Prometheus, alert: str, timeout_s: float = 60) -> None:
    wait_until(
        lambda: prometheus.alert_state(alert),
        timeout_s,
        f"{alert} firing",
        until=lambda state: state == "firing",
        every_s=0.5,
    )


def scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return bytes(answer.read())


@pytest.mark.long
def test_prometheus_scrapes_every_worker_and_holds_the_jobs_figures_and_the_worker_alerts_fire(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    topics = pipeline.topics
    tensors = topics.tensors("tiny")
    ports = {GPU: free_port(), PREPROCESS: free_port(), SCHEDULER: free_port(), NOTIFIER: free_port()}
    prometheus = Prometheus.start(tmp_path, ports, rules_without_waits(ALERTS, tmp_path / "rules.yml"))
    try:
        poison(pipeline)
        # a low lag bound and no GPU worker yet: the preprocess worker pauses once the job arrives
        pipeline.start("preprocess", "preprocess", "--max-tensor-lag", "20", "--metrics-port", str(ports[PREPROCESS]))
        pipeline.start("scheduler", "scheduler", "--instance-id", "metrics-a", "--metrics-port", str(ports[SCHEDULER]))
        notifier = pipeline.start(
            "notifier", "notifier", "--instance-id", "metrics-n", "--metrics-port", str(ports[NOTIFIER])
        )
        drop = tmp_path / "drop"
        drop.mkdir()
        write_jsonl(drop / "in.jsonl", example_lines(RECORDS))
        job_id = scheduled_job(pipeline, drop)
        eventually(prometheus, pipeline, f'nearline_backpressure_paused{{job="{PREPROCESS}"}}', 1)

        gpu = pipeline.start(
            "gpu", "gpu", "--model", "tiny", "--max-batch-size", "8", "--metrics-port", str(ports[GPU])
        )
        outcome, _ = watch_job(
            pipeline.settings, topics, job_id, RECORDS, WaitRules(check=pipeline.check_workers, timeout_s=180)
        )
        assert len(outcome.results) == RECORDS and not outcome.dead

        # what each worker consumed and produced, by topic: the job and the poison
        eventually(
            prometheus, pipeline, f'sum(nearline_records_consumed_total{{job="{GPU}",topic="{tensors}"}})', RECORDS + 2
        )
        consumed = f'nearline_records_consumed_total{{job="{PREPROCESS}",topic="{topics.raw_text}"}}'
        eventually(prometheus, pipeline, consumed, RECORDS + 3)
        produced = {
            (PREPROCESS, tensors): RECORDS,
            (PREPROCESS, topics.dead_letters): 3,
            (GPU, topics.results): RECORDS,
            (GPU, topics.cache("tiny")): RECORDS,  # each result in the results cache too (docs/reuse.md)
            (GPU, topics.dead_letters): 2,
        }
        eventually(
            prometheus,
            pipeline,
            lambda: series(prometheus, "nearline_records_produced_total", "job", "topic"),
            produced,
        )
        dead = {
            (PREPROCESS, "preprocess", "preprocess", "NotSingleObjectError"): 1,
            (PREPROCESS, "preprocess", "preprocess", "ValueError"): 2,
            (GPU, "gpu", "inference", "TensorFormatError"): 2,
        }
        dead_letters = "nearline_dead_letters_total"
        eventually(
            prometheus, pipeline, lambda: series(prometheus, dead_letters, "job", "worker", "stage", "reason"), dead
        )

        # executed batches: every record of the job ran once, in batches of at most 8
        gpu_only = f'{{job="{GPU}",model="tiny"}}'
        eventually(prometheus, pipeline, f"nearline_batch_size_records_sum{gpu_only}", RECORDS)
        batch_lane = f'{{job="{GPU}",model="tiny",lane="bulk"}}'  # the job was submitted in the bulk lane
        eventually(prometheus, pipeline, f"nearline_end_to_end_seconds_count{batch_lane}", RECORDS)
        assert prometheus.value(f'nearline_end_to_end_seconds_count{{job="{GPU}",lane="live"}}') == 0
        batches = prometheus.value(f"nearline_batch_size_records_count{gpu_only}")
        assert batches is not None and RECORDS / 8 <= batches < RECORDS
        assert prometheus.value(f'nearline_batch_size_records_bucket{{job="{GPU}",le="8.0"}}') == batches
        assert prometheus.value(f"nearline_inference_seconds_count{gpu_only}") == batches
        real = prometheus.value(f"nearline_real_tokens_total{gpu_only}")
        padded = prometheus.value(f"nearline_padded_tokens_total{gpu_only}")
        assert real == job_tokens(pipeline, job_id)
        assert padded == prometheus.value(f"nearline_batch_padded_tokens_sum{gpu_only}")
        assert real is not None and padded is not None and real <= padded
        busy = prometheus.value(f"nearline_engine_busy_seconds_total{gpu_only}")
        assert busy == pytest.approx(prometheus.value(f"nearline_inference_seconds_sum{gpu_only}"))
        assert busy == pytest.approx(prometheus.value(f"nearline_lane_engine_seconds_total{batch_lane}"))
        assert 0 <= (prometheus.value(f"nearline_engine_busy_ratio{gpu_only}") or -1) <= 1

        # settled: nothing in flight, nothing lagging, no backpressure
        eventually(prometheus, pipeline, f"nearline_windows_in_flight{gpu_only}", 0)
        eventually(prometheus, pipeline, f'sum(nearline_consumer_lag_records{{job="{GPU}",topic="{tensors}"}})', 0)
        eventually(
            prometheus,
            pipeline,
            f'sum(nearline_consumer_lag_records{{job="{PREPROCESS}",topic="{topics.raw_text}"}})',
            0,
        )
        eventually(prometheus, pipeline, f'nearline_backpressure_paused{{job="{PREPROCESS}"}}', 0)

        # the scheduler: one tick, won, one job submitted
        assert series(prometheus, "nearline_scheduler_ticks_claimed_total", "outcome") == {("won",): 1, ("lost",): 0}
        eventually(prometheus, pipeline, "nearline_scheduler_jobs_submitted_total", 1)
        assert prometheus.value("nearline_scheduler_jobs_failed_total") == 0

        info = series(prometheus, "nearline_build_info", "job", "worker", "model", "model_version", "engine")
        assert info == {
            (GPU, "gpu", "tiny", "1", "onnxruntime"): 1,
            (PREPROCESS, "preprocess", "", "", ""): 1,
            (SCHEDULER, "scheduler", "", "", ""): 1,
            (NOTIFIER, "notifier", "", "", ""): 1,
        }
        assert series(prometheus, "up", "job") == {(GPU,): 1, (PREPROCESS,): 1, (SCHEDULER,): 1, (NOTIFIER,): 1}
        # no job asked for a webhook: the notifier's counters are there, at zero
        assert series(prometheus, "nearline_notifier_attempts_total", "outcome") == {("delivered",): 0, ("failed",): 0}
        for job, port in ports.items():
            checked = subprocess.run(
                [promtool(), "check", "metrics"], input=scrape(port), capture_output=True, timeout=30
            )
            assert checked.returncode == 0, f"{job}: {(checked.stdout + checked.stderr).decode()}"

        # the dashboard asks only for what was scraped, and every one of its queries answers
        dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
        queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        scraped = set(prometheus.api("label/__name__/values"))
        assert set().union(*(metric_names(q) for q in queries)) - scraped - PROMETHEUS_SERIES == set()
        for query in queries:
            answer = prometheus.query(query.replace("$__rate_interval", "30s").replace("$model", ".*"))
            assert answer, f"no data for {query}"

        # the GPU worker goes, then the notifier: the shipped alerts (without their waits) fire
        for alert in ("GpuWorkerAbsent", "PreprocessWorkerAbsent", "SchedulerDown", "NotifierDown"):
            assert prometheus.alert_state(f"Nearline{alert}") == "inactive"
        gpu.stop()
        eventually(prometheus, pipeline, f'up{{job="{GPU}"}}', 0)
        firing(prometheus, "NearlineGpuWorkerAbsent")
        assert prometheus.alert_state("NearlinePreprocessWorkerAbsent") == "inactive"
        notifier.stop()
        eventually(prometheus, pipeline, f'up{{job="{NOTIFIER}"}}', 0)
        firing(prometheus, "NearlineNotifierDown")
        assert prometheus.alert_state("NearlineSchedulerDown") == "inactive"
    finally:
        prometheus.stop()
