"""--label, --complete-within and --notify as the user types them: what is taken, and what each
refusal says."""

from __future__ import annotations

import pytest

from jobs.job_terms import parse_duration, parse_labels, webhook_problem
from schemas import JobTerms


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("24h", 86_400), ("1h30m", 5_400), ("90s", 90), ("500ms", 0.5), ("7d", 604_800), ("2w", 1_209_600), ("5", 5),
     (" 2.5 ", 2.5), ("1H", 3_600)],
)  # fmt: skip
def test_durations_are_read_as_openai_writes_its_completion_window(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "5x", "-3", "24 h", "1h-30m", "tomorrow", "1e3", "30s30s", "30m1h"])
def test_what_is_not_a_duration_says_what_one_looks_like(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration: use a number of seconds or a duration such as 90s"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["0s", "0", "0.0001ms", "367d", "10000000000d"])
def test_a_window_under_a_millisecond_or_over_a_year_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="a completion window must be from 1ms to 366d"):
        parse_duration(text)


def test_labels_are_key_value_pairs_and_a_key_given_twice_keeps_its_last_value() -> None:
    got = parse_labels(["team=search", "example.com/owner=ana", "note=a=b", "team=ads", "empty=", "pad= x\r"])
    assert got == {"team": "ads", "example.com/owner": "ana", "note": "a=b", "empty": "", "pad": "x"}


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("team", "is not a label: use KEY=VALUE"),
        ("=x", "is not a label key"),
        ("-team=x", "is not a label key"),
        ("te am=x", "is not a label key"),
        ("team=a\tb", "one line without tabs"),
    ],
)
def test_what_is_not_a_label_is_named(item: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_labels([item])


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.com/hook", "must start with http:// or https://"),
        ("example.com/hook", "must start with http:// or https://"),
        ("http:///hook", "must name a host"),
        ("http://localhost:99999/hook", "is not a URL"),
    ],
)
def test_a_webhook_that_cannot_be_one_is_refused_before_the_job_runs(url: str, says: str) -> None:
    problem = webhook_problem(url)
    assert problem is not None and says in problem


def test_webhooks_of_any_host_and_port_are_taken_unreached() -> None:
    assert webhook_problem("https://hooks.example.com/nearline?team=a") is None
    assert webhook_problem("http://127.0.0.1:1/closed-port") is None  # reachability is the notifier's to report


def test_a_deadline_counts_from_the_submission() -> None:
    assert JobTerms(complete_within_s=5).deadline_at(1_000_000) == 6_000_000
    assert JobTerms().deadline_at(1_000_000) is None
