"""The batch-API options refused as a hostile user would give them: each a usage error (exit 2)
naming what is wrong, before any broker is asked or any record is read."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from jobs.cli.main import cli


def usage_error(*args: str, cluster: bool = True) -> str:
    env = {"NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1" if cluster else ""}
    out = CliRunner().invoke(cli, list(args), env=env)
    assert out.exit_code == 2, out.output
    return out.output


@pytest.fixture
def texts(tmp_path: Path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("one\ntwo\n")
    return path


def test_a_window_that_is_not_a_duration(texts: Path) -> None:
    said = usage_error("submit", str(texts), "-m", "minilm", "--complete-within", "tomorrow")
    assert "'tomorrow' is not a duration: use a number of seconds or a duration such as 90s" in said


def test_a_label_that_is_not_key_value(texts: Path) -> None:
    assert "'team' is not a label: use KEY=VALUE" in usage_error(
        "submit", str(texts), "-m", "minilm", "--label", "team"
    )
    assert "is not a label" in usage_error("jobs", "list", "--label", "oops")


def test_a_webhook_that_is_not_http(texts: Path) -> None:
    said = usage_error("submit", str(texts), "-m", "minilm", "--notify", "ftp://example.com/hook")
    assert "a webhook URL must start with http:// or https://" in said


def test_an_error_file_in_a_missing_folder_or_on_the_output_itself(texts: Path, tmp_path: Path) -> None:
    missing = usage_error("results", "job-1", "-o", str(tmp_path / "out.jsonl"), "--errors", "/nonexistent/e.jsonl")
    assert "folder /nonexistent does not exist" in missing
    out = str(tmp_path / "out.jsonl")
    assert "is -o too" in usage_error("run", str(texts), "-m", "minilm", "-o", out, "--errors", out)
    assert "is -o too" in usage_error("run", str(texts), "-m", "minilm", "--errors", out, "-o", out)
    around = str(tmp_path / ".." / tmp_path.name / "out.jsonl")
    assert "is -o too" in usage_error("results", "job-1", "-o", out, "--errors", around)
    assert "is the input too" in usage_error("run", str(texts), "-m", "minilm", "-o", out, "--errors", str(texts))
    assert texts.read_text() == "one\ntwo\n"


def test_a_webhook_for_a_run_on_its_own_broker(texts: Path, tmp_path: Path) -> None:
    said = usage_error("run", str(texts), "-m", "minilm", "--notify", "http://127.0.0.1:9/hook", cluster=False)
    assert "no notifier could tell the URL" in said


def test_a_missing_input_is_named_before_a_missing_model(tmp_path: Path) -> None:
    assert f"{tmp_path / 'nope.jsonl'}: no such file" in usage_error("submit", str(tmp_path / "nope.jsonl"))


def test_a_file_that_names_no_model_needs_model(texts: Path) -> None:
    assert "Missing option '--model'" in usage_error("submit", str(texts))
