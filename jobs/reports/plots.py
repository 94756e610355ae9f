"""Charts as inline SVG strings, so a report is one file that any browser renders offline.

Pure functions of plain numbers: no plotting library, no scripts, no fonts or files to fetch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

WIDTH, HEIGHT = 720, 260
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 60, 16, 28, 44


@dataclass(frozen=True)
class Bar:
    left: float
    right: float
    height: float
    label: str = ""  # shown under the bar when set (categorical axes)


def nice_step(span: float, target_ticks: int = 5) -> float:
    """A 1, 2 or 5 times a power of ten step that cuts `span` into about `target_ticks` parts."""
    if span <= 0:
        return 1.0
    raw = span / target_ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def ticks(low: float, high: float, target: int = 5) -> list[float]:
    step = nice_step(high - low, target)
    first = math.ceil(low / step) * step
    return [round(first + i * step, 10) for i in range(int((high - first) / step + 1e-9) + 1)]


def fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}"


class _Frame:
    """Maps data to pixels inside the margins and draws the axes."""

    def __init__(self, x: tuple[float, float], y: tuple[float, float], width: int, height: int) -> None:
        self.x0, self.x1 = x if x[1] > x[0] else (x[0], x[0] + 1)
        self.y0, self.y1 = y if y[1] > y[0] else (y[0], y[0] + 1)
        self.width, self.height = width, height

    def px(self, x: float) -> float:
        return MARGIN_LEFT + (x - self.x0) / (self.x1 - self.x0) * (self.width - MARGIN_LEFT - MARGIN_RIGHT)

    def py(self, y: float) -> float:
        return (
            self.height
            - MARGIN_BOTTOM
            - (y - self.y0) / (self.y1 - self.y0) * (self.height - MARGIN_TOP - MARGIN_BOTTOM)
        )

    def axes(self, title: str, x_label: str, y_label: str, x_ticks: list[tuple[float, str]]) -> list[str]:
        bottom, left = self.height - MARGIN_BOTTOM, MARGIN_LEFT
        out = [
            f'<text x="{self.width / 2}" y="16" class="title">{escape(title)}</text>',
            f'<line x1="{left}" y1="{bottom}" x2="{self.width - MARGIN_RIGHT}" y2="{bottom}" class="axis"/>',
            f'<line x1="{left}" y1="{MARGIN_TOP}" x2="{left}" y2="{bottom}" class="axis"/>',
            f'<text x="{self.width / 2}" y="{self.height - 6}" class="label">{escape(x_label)}</text>',
            f'<text x="14" y="{(MARGIN_TOP + bottom) / 2}" class="label" '
            f'transform="rotate(-90 14 {(MARGIN_TOP + bottom) / 2})">{escape(y_label)}</text>',
        ]
        for value in ticks(self.y0, self.y1, 4):
            y = self.py(value)
            out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{self.width - MARGIN_RIGHT}" y2="{y:.1f}" class="grid"/>')
            out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{fmt(value)}</text>')
        for value, text in x_ticks:
            x = self.px(value)
            # a label centred on the right edge would be cut off: end it there instead
            anchor = ' text-anchor="end"' if x > self.width - MARGIN_RIGHT - 3 * len(text) else ""
            out.append(f'<text x="{x:.1f}" y="{bottom + 16}" class="tick"{anchor}>{escape(text)}</text>')
        return out


def _svg(body: list[str], width: int, height: int, name: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" data-plot="{escape(name)}">' + "".join(body) + "</svg>"
    )


@dataclass(frozen=True)
class ChartStyle:
    """A chart's words, colour and size."""

    title: str
    x_label: str
    y_label: str
    color: str  # the bars'
    x_ticks: list[tuple[float, str]] | None = None  # None: about six round values
    legend: str | None = None  # the bars' entry in a legend (shown with a line's)
    width: int = WIDTH
    height: int = HEIGHT


@dataclass(frozen=True)
class Line:
    """A line drawn over the bars, on their axes."""

    points: Sequence[tuple[float, float]]
    color: str = "#e45756"
    label: str | None = None  # its entry in the legend


def bar_chart(name: str, bars: Sequence[Bar], style: ChartStyle, line: Line | None = None) -> str:
    """Bars on a numeric x axis (a histogram, a time series) with an optional line on top."""
    title, x_ticks, color, width, height = style.title, style.x_ticks, style.color, style.width, style.height
    points = line.points if line is not None else ()
    if not bars:
        return _svg(
            [f'<text x="{width / 2}" y="{height / 2}" class="title">{escape(title)}: no data</text>'],
            width,
            height,
            name,
        )
    top = max([b.height for b in bars] + [y for _, y in points]) * 1.08
    frame = _Frame((min(b.left for b in bars), max(b.right for b in bars)), (0.0, top), width, height)
    if x_ticks is None:
        x_ticks = [(v, fmt(v)) for v in ticks(frame.x0, frame.x1, 6)]
    body = frame.axes(title, style.x_label, style.y_label, x_ticks)
    for bar in bars:
        x, right = frame.px(bar.left), frame.px(bar.right)
        y = frame.py(bar.height)
        body.append(
            f'<rect x="{x + 0.5:.1f}" y="{y:.1f}" width="{max(right - x - 1, 1):.1f}" '
            f'height="{frame.py(0) - y:.1f}" fill="{color}"><title>{escape(bar.label or fmt(bar.left))}: '
            f"{fmt(bar.height)}</title></rect>"
        )
        if bar.label:
            body.append(
                f'<text x="{(x + right) / 2:.1f}" y="{frame.py(0) + 16}" class="tick">{escape(bar.label)}</text>'
            )
    if line is not None and points:
        drawn = " ".join(f"{frame.px(x):.1f},{frame.py(y):.1f}" for x, y in points)
        body.append(f'<polyline points="{drawn}" fill="none" stroke="{line.color}" stroke-width="2"/>')
    if style.legend:
        body.append(f'<rect x="{width - 230}" y="30" width="12" height="12" fill="{color}"/>')
        body.append(f'<text x="{width - 213}" y="40" class="legend">{escape(style.legend)}</text>')
        if line is not None and points and line.label:
            body.append(f'<rect x="{width - 230}" y="48" width="12" height="3" fill="{line.color}"/>')
            body.append(f'<text x="{width - 213}" y="54" class="legend">{escape(line.label)}</text>')
    return _svg(body, width, height, name)


def histogram_bars(values_ms: np.ndarray, bins: int = 24) -> tuple[list[Bar], list[tuple[float, str]]]:
    """Counts on log10-spaced bins: stage latencies span microseconds to seconds in one job.

    Bars are placed on log10(ms); values at or below 10 µs share the first bin."""
    if len(values_ms) == 0:
        return [], []
    floor = 0.01
    logs = np.log10(np.maximum(values_ms, floor))
    low, high = math.floor(logs.min() * 4) / 4, math.ceil(logs.max() * 4) / 4
    if high <= low:
        high = low + 0.25
    counts, edges = np.histogram(logs, bins=bins, range=(low, high))
    bars = [Bar(float(edges[i]), float(edges[i + 1]), float(c)) for i, c in enumerate(counts)]
    return bars, log_ticks(low, high)


def log_ticks(low: float, high: float) -> list[tuple[float, str]]:
    """Labels at 1, 2 and 5 times powers of ten between log10 bounds; only the powers if that is plenty."""
    marks = [
        (math.log10(m) + d, m * 10.0**d)
        for d in range(math.floor(low), math.ceil(high) + 1)
        for m in (1, 2, 5)
        if low - 1e-9 <= math.log10(m) + d <= high + 1e-9
    ]
    decades = [(x, v) for x, v in marks if abs(x - round(x)) < 1e-9]
    chosen = decades if len(decades) >= 3 else marks
    return [(x, f"{fmt(v)} ms") for x, v in chosen]
