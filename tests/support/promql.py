"""The metric names a PromQL expression reads, and the names nearline's workers export: so the
shipped dashboard and alerts can be checked to ask only for metrics that exist."""

from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "nearline.json"
# Series Prometheus makes itself for every target and for alerts, not exported by any worker.
PROMETHEUS_SERIES = {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds", "scrape_samples_scraped"}

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
_KEYWORDS |= {"inf", "nan"}
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers that are not functions, aggregations,
    keywords, label names (inside {...} and by/without/on/ignoring lists) or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers, and Grafana's ${variables}
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in _NAME.finditer(text):
        before = text[match.start() - 1] if match.start() else " "
        if before.isdigit() or before in ".$":  # 1e3, 5m after offset, $model
            continue
        if text[match.end() :].lstrip().startswith("(") or match.group().lower() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def exported_names() -> set[str]:
    """Every series name nearline's workers can export: their metric families, with the suffixes
    each type's samples carry, and the process collector's (prometheus_client's default registry)."""
    for module in (
        "kafka_io.metrics",
        "gpu_consumer.metrics",
        "preprocess_app.metrics",
        "jobs.scheduling.metrics",
        "jobs.notifications.metrics",
    ):
        importlib.import_module(module)  # each registers its families

    suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"], "info": ["_info"]}
    names = set()
    for family in REGISTRY.collect():
        names |= {family.name + s for s in suffixes.get(family.type, [""])}
    return names


def promtool() -> str:
    """promtool, from Debian's prometheus package (.ci/setup --tests installs it)."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: `apt-get install prometheus` (.ci/setup --tests does)")
    return path
