"""The shipped alert rules: valid, unit-tested by promtool, and reading only metrics that exist."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.support.promql import ALERT_TESTS, ALERTS, PROMETHEUS_SERIES, exported_names, metric_names, promtool


@pytest.mark.process
def test_the_alert_rules_are_valid_and_pass_their_unit_tests() -> None:
    checked = subprocess.run([promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 8 rules found" in checked.stdout
    tested = subprocess.run(
        [promtool(), "test", "rules", ALERT_TESTS.name], cwd=ALERT_TESTS.parent, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_unit_tested_firing() -> None:
    rules = [r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    fired = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c["exp_alerts"]}
    assert sorted(fired) == sorted(rules)


def test_the_alerts_read_only_metrics_the_workers_export() -> None:
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    used = set().union(*(metric_names(r["expr"]) for r in rules))
    assert used - exported_names() - PROMETHEUS_SERIES == set()
    assert {"nearline_consumer_lag_records", "nearline_dead_letters_total", "up"} <= used


def test_metric_names_are_read_from_promql_without_functions_labels_or_durations() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, model) (rate(nearline_end_to_end_seconds_bucket{model=~"$model"}'
        '[$__rate_interval]))) > 1e3 and on (job) absent(up{job="nearline-gpu"} == 1) offset 5m'
        " or sum without (partition) (nearline_consumer_lag_records) / ignoring(x) group_left foo:bar_ratio"
    )
    assert metric_names(expr) == {
        "nearline_end_to_end_seconds_bucket",
        "up",
        "nearline_consumer_lag_records",
        "foo:bar_ratio",
    }
