"""Report charts as pure functions: axis steps, bins and throughput buckets from known inputs."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from jobs.registry import JobStatus
from jobs.reports.plots import Bar, ChartStyle, bar_chart, histogram_bars, log_ticks, nice_step, ticks
from jobs.reports.report import render, stage_latencies_ms, throughput
from results.usage import Usage
from schemas import DeadLetter, Job, JobTerms, now_us
from tests.support.inputs import result


@pytest.mark.parametrize(("span", "step"), [(10, 2), (7, 2), (1000, 200), (0.9, 0.2), (3, 1), (0, 1)])
def test_axis_steps_are_one_two_or_five_times_a_power_of_ten(span: float, step: float) -> None:
    assert nice_step(span) == pytest.approx(step)


def test_ticks_cover_the_range_on_the_step() -> None:
    assert ticks(0, 10) == [0, 2, 4, 6, 8, 10]
    assert ticks(0.5, 3.2) == [1, 2, 3]  # span 2.7 -> step 1 (the last tick before the top)


def test_a_latency_histogram_counts_every_value_once_on_log_bins() -> None:
    values = np.array([0.0, 0.005, 0.5, 1.0, 1.0, 30.0, 950.0])  # ms; zero and sub-10 µs land in bin 0
    bars, marks = histogram_bars(values, bins=12)
    assert sum(b.height for b in bars) == len(values)
    assert bars[0].height == 2
    assert [label for _, label in marks] == ["0.01 ms", "0.1 ms", "1 ms", "10 ms", "100 ms", "1,000 ms"]
    narrow = log_ticks(0.5, 1.5)  # under three powers of ten in range: 1-2-5 marks instead
    assert [label for _, label in narrow] == ["5 ms", "10 ms", "20 ms"]
    assert [x for x, _ in narrow] == pytest.approx([np.log10(5), 1.0, np.log10(20)])


def test_throughput_buckets_hold_every_record_at_its_rate() -> None:
    # ten records, results at 0.1 s steps from 1.0 s after submission; preprocessing 0.5 s earlier
    rows = [result(f"r{i}", "b", [0, 0, 500_000 + i * 100_000, 0, 0, 0, 1_000_000 + i * 100_000]) for i in range(10)]
    tp = throughput(rows, buckets=10)
    assert tp.bucket_s == pytest.approx(0.2)
    assert sum(b.height * tp.bucket_s for b in tp.inferred) == pytest.approx(10)
    assert sum(rate * tp.bucket_s for _, rate in tp.preprocessed) == pytest.approx(10)
    assert tp.inferred[5].left == pytest.approx(1.0) and tp.inferred[5].height == pytest.approx(10.0)  # 2 in 0.2 s


def test_stage_latencies_add_up_to_end_to_end() -> None:
    rows = [result("a", "b", [0, 1000, 3000, 6000, 10_000, 15_000, 21_000])]
    lat = stage_latencies_ms(rows)
    assert [float(v[0]) for k, v in lat.items() if k != "end to end"] == [1, 2, 3, 4, 5, 6]
    assert float(lat["end to end"][0]) == 21


def test_an_empty_chart_says_so_instead_of_failing() -> None:
    assert "no data" in bar_chart("x", [], ChartStyle("Batch sizes", "", "", "#000000"))
    svg = bar_chart("x", [Bar(0, 1, 3, "8")], ChartStyle("t", "", "", "#123456"))
    assert 'fill="#123456"' in svg and "<title>8: 3</title>" in svg


def test_the_report_groups_dead_letters_by_stage_and_error_with_an_example() -> None:
    job = Job("job-1", "tiny", "in.jsonl", "text", 3, 0)
    status = JobStatus(job)
    for rid, stage, kind in [
        ("a", "preprocess", "TextTooLong"),
        ("b", "preprocess", "TextTooLong"),
        ("c", "gpu", "EngineError"),
    ]:
        status.outcome.dead[rid] = DeadLetter(stage, kind, f"{rid} broke", "raw.text", 0, 0, b"", 0, "job-1", rid)
    page = render(status)
    assert "<tr><td>preprocess</td><td>TextTooLong</td><td>2</td><td>a: a broke</td></tr>" in page
    assert "<tr><td>gpu</td><td>EngineError</td><td>1</td><td>c: c broke</td></tr>" in page
    assert status.state == "completed_with_errors" and "no data" in page  # no results: empty charts say so


def test_the_report_shows_the_deadline_time_left_labels_and_usage() -> None:
    deadline = now_us() + 3_600_000_000
    job = Job("job-2", "tiny", "in.jsonl", "text", 10, 0, terms=JobTerms({"team": "search"}), deadline_at=deadline)
    status = JobStatus(job)
    status.outcome.usage = Usage(records=4, length=96, engine_us=2_500_000)
    page = render(status)
    when = datetime.fromtimestamp(deadline / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f" · deadline {when} (" in page and " left)" in page
    assert " · labels team=search" in page
    assert "Usage: 4 records, 96 input tokens, 2.50 engine-s." in page
    passed = JobStatus(Job("job-3", "tiny", "in.jsonl", "text", 10, 0, deadline_at=now_us() - 1))
    assert "(passed)" in render(passed) and passed.state == "expired"
