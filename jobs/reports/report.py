"""`nearline report`: one self-contained HTML page about a job — throughput over time, latency per
stage and batch sizes — built from the stage timestamps its results carry (as `profile` is)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

import numpy as np

from jobs.progress import format_eta
from jobs.registry import JobStatus, format_labels
from jobs.reports.plots import Bar, ChartStyle, Line, bar_chart, histogram_bars, nice_step
from jobs.reports.profile import Profile, as_timings, profile, stage_samples_us
from results.timings import MISSING, Timings
from schemas import InferenceResult

INFERRED_COLOR = "#4c78a8"
PREPROCESSED_COLOR = "#f58518"
LATENCY_COLOR = "#54a24b"
BATCH_COLOR = "#b279a2"

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1500px; color: #222; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.meta { color: #555; margin: 0 0 12px; }
table { border-collapse: collapse; margin: 8px 0; } td, th { padding: 3px 12px; text-align: right; }
th:first-child, td:first-child { text-align: left; } thead th { border-bottom: 1px solid #999; }
.panels { display: flex; flex-wrap: wrap; gap: 8px; }
svg { background: #fff; border: 1px solid #e3e3e3; }
svg .title { font: bold 13px system-ui, sans-serif; text-anchor: middle; }
svg .label { font: 12px system-ui, sans-serif; text-anchor: middle; fill: #444; }
svg .tick { font: 11px system-ui, sans-serif; text-anchor: middle; fill: #555; }
svg .legend { font: 12px system-ui, sans-serif; fill: #333; }
svg .axis { stroke: #333; } svg .grid { stroke: #eee; }
"""


@dataclass(frozen=True)
class Throughput:
    bucket_s: float
    inferred: list[Bar]  # records/s per bucket, by when the result was produced
    preprocessed: list[tuple[float, float]]  # records/s per bucket, by when preprocessing ended


def throughput(results: Timings | Iterable[InferenceResult], buckets: int = 40) -> Throughput:
    ts = as_timings(results).stamps()
    keys = ("submitted", "preprocess_end", "result_produced")
    mask = np.all(np.stack([ts[k] for k in keys]) != MISSING, axis=0)
    if not mask.any():
        return Throughput(1.0, [], [])
    start = ts["submitted"][mask].min()
    done = (ts["result_produced"][mask] - start) / 1e6
    pre = (ts["preprocess_end"][mask] - start) / 1e6
    bucket = nice_step(float(done.max()), buckets)
    n = int(done.max() // bucket) + 1
    inferred = np.bincount((done // bucket).astype(int), minlength=n)
    preprocessed = np.bincount(np.minimum(pre // bucket, n - 1).astype(int), minlength=n)
    return Throughput(
        bucket,
        [Bar(i * bucket, (i + 1) * bucket, c / bucket) for i, c in enumerate(inferred)],
        [((i + 0.5) * bucket, c / bucket) for i, c in enumerate(preprocessed)],
    )


def stage_latencies_ms(results: Timings | Iterable[InferenceResult]) -> dict[str, np.ndarray]:
    """Each stage's latency per record, in ms, plus end to end; records missing a stamp are left out."""
    return {name: us / 1000 for name, us in stage_samples_us(as_timings(results)).items()}


def _deadline(status: JobStatus) -> str:
    left = status.deadline_news()
    if left is None or status.job.deadline_at is None:
        return ""
    when = datetime.fromtimestamp(status.job.deadline_at / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f" · deadline {when} ({format_eta(left)} left)" if left else f" · deadline {when} (passed)"


def render(status: JobStatus, generated_at: datetime | None = None) -> str:
    job, results = status.job, status.outcome.timings
    generated = (generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    try:
        summary: Profile | None = profile(results)
    except ValueError:
        summary = None
    counts = status.counts()
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>nearline report: {escape(job.job_id)}</title><style>{STYLE}</style></head><body>",
        f"<h1>Job {escape(job.job_id)}</h1>",
        f'<p class="meta">model {escape(job.model)} · input {escape(job.input)} · state <b>{status.state}</b>'
        + f" · {escape(job.priority)} lane"
        + (f" · schedule {escape(job.schedule)}" if job.schedule else "")
        + _deadline(status)
        + (f" · labels {escape(format_labels(job.terms.labels))}" if job.terms.labels else "")
        + f" · generated {generated}</p>",
        "<table><thead><tr>" + "".join(f"<th>{escape(k.replace('_', ' '))}</th>" for k in counts) + "</tr></thead>",
        "<tbody><tr>" + "".join(f"<td>{v:,}</td>" for v in counts.values()) + "</tr></tbody></table>",
    ]
    if job.error:
        parts.append(f"<p><b>Failed:</b> {escape(job.error)}</p>")
    usage = status.outcome.usage
    if usage is not None and usage.records:
        parts.append(f"<p>Usage: {escape(usage.text(job.kind))}.</p>")
    if summary is not None:
        parts.append(
            f"<p>{summary.records:,} records in {summary.wall_s:.2f} s ({summary.records_per_s:,.1f} records/s); "
            f"bottleneck: <b>{escape(summary.bottleneck)}</b>; engine busy {summary.engine_busy_fraction:.0%} "
            f"of the job's wall time.</p>"
        )
    parts += _dead_letter_section(status)
    parts += _throughput_section(results)
    parts += _latency_section(results, summary)
    parts += _batch_section(summary)
    parts.append("</body></html>")
    return "\n".join(parts)


def _dead_letter_section(status: JobStatus) -> list[str]:
    """Why records failed, grouped by stage and error type: the first thing to read in a bad job."""
    if not status.outcome.dead:
        return []
    groups = Counter((d.stage, d.error_type) for d in status.outcome.dead.values())
    example: dict[tuple[str, str], str] = {}
    for record_id, d in sorted(status.outcome.dead.items()):
        example.setdefault((d.stage, d.error_type), f"{record_id}: {d.error}")
    rows = [
        f"<tr><td>{escape(stage)}</td><td>{escape(kind)}</td><td>{n:,}</td>"
        f"<td>{escape(example[(stage, kind)])}</td></tr>"
        for (stage, kind), n in groups.most_common()
    ]
    return [
        '<section id="dead-letters"><h2>Dead letters</h2>',
        "<table><thead><tr><th>stage</th><th>error</th><th>records</th><th>first example</th></tr></thead>",
        "<tbody>",
        *rows,
        "</tbody></table><p>Inspect and replay them with <code>nearline dlq list --job "
        f"{escape(status.job.job_id)}</code>.</p></section>",
    ]


def _throughput_section(results: Timings) -> list[str]:
    tp = throughput(results)
    style = ChartStyle(
        f"Throughput over time ({tp.bucket_s:g} s buckets)",
        "seconds since the job was submitted",
        "records/s",
        INFERRED_COLOR,
        legend="inferred (results produced)",
    )
    chart = bar_chart("throughput", tp.inferred, style, Line(tp.preprocessed, PREPROCESSED_COLOR, "preprocessed"))
    return ['<section id="throughput"><h2>Throughput</h2>', chart, "</section>"]


def _latency_section(results: Timings, summary: Profile | None) -> list[str]:
    panels = []
    for name, values in stage_latencies_ms(results).items():
        bars, x_ticks = histogram_bars(values)
        panels.append(
            bar_chart(
                f"latency-{name.replace(' ', '-')}",
                bars,
                ChartStyle(name, "latency (log scale)", "records", LATENCY_COLOR, x_ticks, width=360, height=200),
            )
        )
    out = ['<section id="latency"><h2>Latency per stage</h2>', '<div class="panels">', *panels, "</div>"]
    if summary is not None:
        rows = [*summary.stages.items(), ("end to end", summary.end_to_end)]
        out.append("<table><thead><tr><th>stage</th><th>p50 ms</th><th>p95 ms</th><th>p99 ms</th><th>mean ms</th>")
        out.append("</tr></thead><tbody>")
        out += [
            f"<tr><td>{escape(n)}</td><td>{s.p50_ms:.1f}</td><td>{s.p95_ms:.1f}</td><td>{s.p99_ms:.1f}</td>"
            f"<td>{s.mean_ms:.1f}</td></tr>"
            for n, s in rows
        ]
        out.append("</tbody></table>")
    out.append("</section>")
    return out


def _batch_section(summary: Profile | None) -> list[str]:
    sizes = summary.batch_sizes if summary else {}
    bars = [Bar(i, i + 1, float(n), str(size)) for i, (size, n) in enumerate(sorted(sizes.items()))]
    chart = bar_chart(
        "batch-sizes", bars, ChartStyle("Batch sizes", "records in the batch", "batches", BATCH_COLOR, [])
    )
    out = ['<section id="batch-sizes"><h2>Batches</h2>', chart]
    if summary is not None:
        out.append(
            f"<p>{summary.batches:,} batches, mean size {summary.mean_batch_size:.1f}"
            + (f"; padding waste {summary.padding_waste:.1%} of the tokens run" if summary.padding_waste else "")
            + "</p>"
        )
    out.append("</section>")
    return out
