from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.reports.profile import busy_time_us, profile
from results.timings import Timings
from schemas import InferenceResult
from tests.support.inputs import example_lines, result, write_jsonl
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import TinyModel


def test_busy_time_is_the_union_of_the_engine_intervals() -> None:
    assert busy_time_us([(0, 10), (5, 20), (30, 40), (35, 36)]) == 30


def test_stage_latencies_bottleneck_and_engine_busy_fraction() -> None:
    # two batches of two records; the wait for inference dominates, so inference is the bottleneck
    results = [
        result("a", "b0", [0, 1000, 2000, 50_000, 50_000, 60_000, 61_000], 8, 10),
        result("b", "b0", [0, 1000, 2000, 50_000, 50_000, 60_000, 61_000], 10, 10),
        result("c", "b1", [0, 1000, 2000, 90_000, 90_000, 100_000, 101_000], 5, 10),
        result("d", "b1", [0, 1000, 2000, 90_000, 90_000, 100_000, 100_000], 7, 10),
    ]
    p = profile(results)
    assert p.records == 4 and p.batches == 2 and p.mean_batch_size == 2
    assert p.stages["preprocess"].p50_ms == pytest.approx(1.0)
    assert p.stages["inference"].p99_ms == pytest.approx(10.0)
    assert p.stages["wait for inference"].mean_ms == pytest.approx(68.0)
    assert (p.slowest_stage, p.bottleneck) == ("wait for inference", "inference")
    assert p.wall_s == pytest.approx(0.101)
    assert p.engine_busy_fraction == pytest.approx(20_000 / 101_000)
    assert p.padding_waste == pytest.approx(1 - 30 / 40)
    assert p.end_to_end.p50_ms == pytest.approx(80.5)  # median of 61, 61, 100, 101 ms


def test_timings_keep_one_row_per_record_and_profile_the_same_as_the_results() -> None:
    results = [
        result("a", "b0", [0, 1000, 2000, 50_000, 50_000, 60_000, 61_000], 8, 10),
        result("b", "b0", [0, 1000, 2000, 50_000, 50_000, 60_000, 61_000], 10, 10),
        result("c", "b1", [0, 1000, 2000, 90_000, 90_000, 100_000, 101_000], 5, 10),
    ]
    timings = Timings.of(results)
    assert len(timings) == 3 and profile(timings) == profile(results)
    # the same record put again (a newer model version) replaces its row: still 3 records, new stamps
    timings.put(result("c", "b2", [0, 1000, 2000, 120_000, 120_000, 130_000, 131_000], 5, 10))
    p = profile(timings)
    assert (p.records, p.batches) == (3, 2)
    assert p.wall_s == pytest.approx(0.131)
    # a record without every stamp is counted by nobody's latency, and does not break the others
    timings.put(InferenceResult("j", "d", 0, "m", "1", (), "b3", 1, {}, {"submitted": 0}, (), 1, 1))
    assert len(timings) == 4 and profile(timings).records == 3


def test_a_bottleneck_other_than_the_slowest_stage_is_explained() -> None:
    # formed windows wait 40 ms for the engine, which runs 10 ms: the queue "batching" is slowest,
    # and it is a queue before the engine, so inference is the bottleneck; the line must say why
    results = [
        result("a", "b0", [0, 1000, 2000, 3000, 43_000, 53_000, 54_000]),
        result("b", "b1", [0, 1000, 2000, 3000, 43_000, 53_000, 54_000]),
    ]
    p = profile(results)
    assert (p.slowest_stage, p.bottleneck) == ("batching", "inference")
    (line,) = [line for line in p.lines() if line.startswith("bottleneck:")]
    assert line == (
        "bottleneck: inference: the slowest stage is 'batching' (40.0 ms a record on average), a queue: "
        "decoded poll windows wait for the engine to finish the batches before them, so inference is what "
        "cannot keep up; to go faster: a faster engine or accelerator, larger executed batches "
        "(--max-batch-size), or more GPU workers"
    )
    assert p.to_dict()["bottleneck_reason"] == line.removeprefix("bottleneck: inference: ")
    # the slowest stage blamed on itself says so, not "(slowest stage: preprocess)"
    own = profile([result("c", "b2", [0, 0, 90_000, 91_000, 91_000, 92_000, 93_000])])
    assert own.bottleneck == "preprocess"
    assert own.bottleneck_reason.startswith("the slowest stage itself, 90.0 ms a record on average; to go faster:")


@pytest.mark.timeout(240)
def test_profile_of_a_job_id_submitted_again_counts_its_latest_submission_as_status_and_results_do(
    pipeline: RunningPipeline, tiny: TinyModel, tmp_path: Path
) -> None:
    pipeline.start("preprocess", "preprocess")
    pipeline.start("gpu", "gpu", "--model", "tiny", "--max-batch-size", "8", "--max-linger-ms", "0")
    # texts of their own: a text of the first would be reused from its result (docs/reuse.md)
    for name, rows in (("first.jsonl", example_lines(50)), ("second.jsonl", example_lines(52)[50:])):
        source = str(write_jsonl(tmp_path / name, rows))
        done = pipeline.cli("submit", source, "--model", "tiny", "--job-id", "job-twice", "--wait")
        assert done.returncode == 0, done.stderr
    status = json.loads(pipeline.cli("status", "job-twice", "--json").stdout)
    assert status["counts"]["inferred"] == 2
    results = pipeline.cli("results", "job-twice")
    assert len(results.stdout.splitlines()) == 2
    profiled = pipeline.cli("profile", "job-twice", "--json")
    assert profiled.returncode == 0, profiled.stderr
    assert json.loads(profiled.stdout)["records"] == 2  # was 52: both submissions
