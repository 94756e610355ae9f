"""The shipped Grafana dashboard: valid JSON whose queries read only metrics the workers export,
and show every one of them."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.promql import DASHBOARD, PROMETHEUS_SERIES, exported_names, metric_names


def queries(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_dashboard_is_valid_json_with_one_id_per_panel() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] == "nearline" and dashboard["title"] == "nearline"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p["type"] == "row" or p["targets"] for p in dashboard["panels"])
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "model"]


def test_the_dashboard_reads_only_metrics_the_workers_export() -> None:
    used = set().union(*(metric_names(q) for q in queries(json.loads(DASHBOARD.read_text(encoding="utf-8")))))
    assert used - exported_names() - PROMETHEUS_SERIES == set()


def test_every_nearline_metric_has_a_panel() -> None:
    used = set().union(*(metric_names(q) for q in queries(json.loads(DASHBOARD.read_text(encoding="utf-8")))))
    family = re.compile(r"_(?:bucket|sum|count)$")
    shown = {family.sub("", name) for name in used}
    exported = {family.sub("", name) for name in exported_names() if name.startswith("nearline_")}
    assert exported - shown == set()
