"""A label is printable text: --label refuses a carriage return or an escape sequence (submit, run,
schedule add), and a label stored otherwise reaches `jobs list` and `status` escaped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.registry import register
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import ENV_NAMESPACE, Topics
from schemas import Job, JobTerms

HOSTILE = "team=ok\r\x1b]0;pwned\x07"


def nearline(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "jobs.cli", *args]
    return subprocess.run(command, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=120)


COMMANDS = {
    "submit": ["submit", "in.txt", "-m", "tiny"],
    "run": ["run", "in.txt", "-m", "tiny"],
    "schedule add": ["schedule", "add", "nightly", "--cron", "0 3 * * *", "--input", "in.txt", "-m", "tiny"],
    "jobs list": ["jobs", "list"],
}


@pytest.mark.process
@pytest.mark.parametrize(
    ("command", "label", "shown"),
    [
        *((name, HOSTILE, "'\\r'") for name in COMMANDS),
        ("submit", "team=a\x1b[2Jb", "'\\x1b'"),
        ("submit", "k=a\u2028b", "'\\u2028'"),  # a line separator
        ("submit", "k=a\x85b", "'\\x85'"),  # a C1 control: next line
    ],
)
def test_a_label_with_a_control_character_is_a_usage_error(command: str, label: str, shown: str) -> None:
    done = nearline(*COMMANDS[command], "--label", label, "--bootstrap-servers", "127.0.0.1:1")
    assert done.returncode == 2, done.stderr
    assert f"its value holds the control character {shown}" in done.stderr
    assert "\x1b" not in done.stderr and "\r" not in done.stderr and not done.stdout


@pytest.mark.process
def test_printable_labels_of_any_script_are_still_taken() -> None:
    done = nearline(
        "submit", "missing.txt", "-m", "tiny", "--label", "team=équipe ✓ 検索", "--bootstrap-servers", "127.0.0.1:1"
    )
    assert "--label" not in done.stderr, done.stderr  # refused later, for the missing input or broker


def test_a_stored_label_with_control_characters_is_shown_escaped(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    ensure_topics(settings, [TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    register(
        settings, topics, Job("job-l", "tiny", "in.txt", "text", 1, 1, terms=JobTerms({"team": "ok\r\x1b]0;pwned\x07"}))
    )
    env = {ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
    listed = nearline("jobs", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.rstrip("\n").endswith("team=ok\\r\\x1b]0;pwned\\x07")
    status = nearline("status", "job-l", env=env)
    assert "labels team=ok\\r\\x1b]0;pwned\\x07" in status.stdout, status.stderr
    for done in (listed, status):
        assert "\x1b" not in done.stdout and "\r" not in done.stdout and "\x07" not in done.stdout


def test_a_schedules_input_with_control_characters_is_listed_escaped(
    settings: KafkaSettings, topics: Topics, tmp_path: Path
) -> None:
    env = {ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
    hostile = str(tmp_path / "\x1b]0;pwned\x07\r*.jsonl")  # a legal file name, typed by whoever adds it
    added = nearline("schedule", "add", "nightly", "--cron", "0 3 * * *", "--input", hostile, "-m", "tiny", env=env)
    assert added.returncode == 0, added.stderr
    listed = nearline("schedule", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.rstrip("\n").endswith("\\x1b]0;pwned\\x07\\r*.jsonl"), listed.stdout
    assert "\x1b" not in listed.stdout and "\r" not in listed.stdout and "\x07" not in listed.stdout
