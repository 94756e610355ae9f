"""CLI behaviour that needs no workers: clear errors and distinct exit codes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest


def nearline(*args: str, env_servers: str = "127.0.0.1:1") -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "NEARLINE_BOOTSTRAP_SERVERS": env_servers}
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.process
@pytest.mark.parametrize(
    "command",
    [
        ["submit", "{input}", "--model", "tiny"],
        ["submit", "{input}", "--model", "tiny", "--wait"],
        ["status", "job-x"],
        ["results", "job-x"],
        ["jobs", "list"],
        ["schedule", "list"],
        ["cancel", "job-x"],
        ["produce", "raw.text", "{input}", "--model", "tiny"],
        ["worker", "gpu", "--model", "tiny"],
        ["worker", "preprocess"],
        ["worker", "scheduler"],
        ["run", "{input}", "--model", "tiny", "--bootstrap-servers", "127.0.0.1:1"],
    ],
)
def test_a_broker_that_is_down_is_named_with_exit_code_3(command: list[str], tmp_path: Path) -> None:
    good = tmp_path / "in.txt"
    good.write_text("one line\n")
    started = time.monotonic()
    done = nearline(*[a.replace("{input}", str(good)) for a in command])
    assert done.returncode == 3, done.stderr
    assert "Kafka at 127.0.0.1:1 cannot be reached: 127.0.0.1:1 refused the connection" in done.stderr, done.stderr
    assert "--bootstrap-servers / NEARLINE_BOOTSTRAP_SERVERS" in done.stderr
    assert "Traceback" not in done.stderr
    # librdkafka wrote a line per reconnect to stderr (~290 before the error): a few at most now
    assert len(done.stderr.splitlines()) <= 5, done.stderr[-3000:]
    assert time.monotonic() - started < 10  # README's bound; a refusal is known at once


@pytest.mark.process
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--max-batch-size", "-5", "-5 is not in the range x>=1"),
        ("--max-batch-size", "0", "0 is not in the range x>=1"),
        ("--max-window", "0", "0 is not in the range x>=1"),
        ("--max-linger-ms", "-10", "-10.0 is not in the range 0<=x<=60000"),
        ("--max-linger-ms", "nan", "'nan' is not a finite number"),
        ("--timeout-s", "nan", "'nan' is not a finite number"),
        ("--timeout-s", "inf", "'inf' is not a finite number"),
        ("--worker-grace-s", "nan", "'nan' is not a finite number"),
    ],
)
def test_a_number_no_worker_could_use_is_a_usage_error_before_any_work(
    option: str, value: str, message: str, tmp_path: Path
) -> None:
    """Not a submitted job whose worker then dies on the value, or a nan that passes every bound."""
    good = tmp_path / "in.txt"
    good.write_text("one line\n")
    done = nearline("run", str(good), "--model", "tiny", option, value)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "submitted" not in done.stderr


@pytest.mark.parametrize(
    ("command", "old"),
    [
        (["run", "in.txt", "--model", "tiny"], "--timeout"),
        (["submit", "in.txt", "--model", "tiny", "--wait"], "--worker-grace"),
        (["worker", "preprocess"], "--session-timeout"),
        (["worker", "gpu", "--model", "tiny"], "--batch-share"),
        (["worker", "gpu", "--model", "tiny"], "--max-queue"),
        (["dlq", "replay", "--job", "j"], "--wait"),
        (["offsets", "reset", "--group", "g", "--topic", "t"], "--to-time"),
    ],
)
def test_a_name_an_option_had_before_the_first_release_is_no_option(command: list[str], old: str) -> None:
    """0.1.0 was never published, so no script was written against the names options had before
    (#53): each is an unknown option (exit 2), not a hidden alias of the new one."""
    from click.testing import CliRunner

    from jobs.cli.main import cli

    done = CliRunner().invoke(cli, [*command, old, "7"], env={"NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    assert done.exit_code == 2 and f"No such option '{old}'" in done.output, done.output


@pytest.mark.process
def test_version_is_the_packages() -> None:
    import tomllib

    version = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())["project"]["version"]
    done = nearline("--version")
    assert done.returncode == 0 and done.stdout == f"nearline, version {version}\n", done


@pytest.mark.process
def test_help_lists_the_env_var_of_every_shared_option() -> None:
    done = nearline("run", "--help")
    assert done.returncode == 0
    for var in ("NEARLINE_BOOTSTRAP_SERVERS", "NEARLINE_NAMESPACE", "NEARLINE_MODEL_REPOSITORY", "NEARLINE_RUN_MODEL"):
        assert var in done.stdout


@pytest.mark.process
def test_models_list_names_a_model_it_cannot_load_and_skips_folders_that_are_not_model_names(tmp_path: Path) -> None:
    from tests.support.tiny_model import broken_repository

    repository = broken_repository(tmp_path / "models")
    (repository / "Not..A.Name" / "1").mkdir(parents=True)
    done = nearline("models", "list", "--model-repository", str(repository))
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert [r[:3] for r in rows] == [
        ["badcfg", "1 (default)", "unavailable"],
        ["badtok", "1 (default)", "text-embedding"],
        ["tiny", "1 (default)", "text-embedding"],
    ]
    assert rows[0][3].startswith("model unavailable: badcfg version 1: ")


@pytest.mark.process
@pytest.mark.parametrize("worker", [["gpu", "--model", "tiny"], ["preprocess"], ["scheduler"]])
def test_a_metrics_port_that_is_taken_is_named_with_exit_code_2_before_anything_connects(worker: list[str]) -> None:
    import os
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # the deployments' variable, as every worker reads it
        env = {**os.environ, "NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1", "NEARLINE_METRICS_PORT": str(port)}
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "worker", *worker], env=env, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 2, done.stderr
    assert f"--metrics-port {port}: " in done.stderr and "in use" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.process
def test_every_worker_lists_its_metrics_port_option_and_variable() -> None:
    for worker in ("gpu", "preprocess", "scheduler"):
        done = nearline("worker", worker, "--help")
        assert "--metrics-port" in done.stdout and "NEARLINE_METRICS_PORT" in done.stdout


@pytest.mark.process
def test_the_broker_that_broker_start_started_outlives_the_command_until_broker_stop(tmp_path: Path) -> None:
    import json
    import os
    import socket

    from kafka_io.broker import free_port

    env = {**os.environ, "HOME": str(tmp_path)}  # `nearline broker` keeps its state in ~/.nearline
    port = free_port()

    def broker(command: str) -> subprocess.CompletedProcess[str]:
        args = ["broker", command, *(["--port", str(port)] if command == "start" else [])]
        return subprocess.run([sys.executable, "-m", "jobs.cli", *args], env=env, capture_output=True, text=True)

    started = broker("start")
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == f"export NEARLINE_BOOTSTRAP_SERVERS=127.0.0.1:{port}"
    try:
        pid = json.loads((tmp_path / ".nearline" / f"broker-{port}.json").read_text())["pid"]
        time.sleep(0.5)  # the command has exited; a broker tied to it would have been killed with it
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        assert f"already running on port {port}" in broker("start").stderr
    finally:
        stopped = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "broker", "stop", "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
        )
    assert stopped.returncode == 0 and f"stopped broker pid {pid}" in stopped.stderr
    assert not Path(f"/proc/{pid}").exists() or ") Z " in Path(f"/proc/{pid}/stat").read_text()


@pytest.mark.process
@pytest.mark.parametrize("command", ["run", "submit", "produce"])
@pytest.mark.parametrize(
    ("job_id", "shown"),
    [
        ("a\nb", "'a\\nb'"),  # broke the one-line rows of `jobs list` and `status`
        ("", "''"),
        ("   ", "'   '"),
        ("x" * 5000, "... (5,000 characters)"),
        ("../../etc", "'../../etc'"),  # `nearline report` writes JOB_ID.html
        ("a/b", "'a/b'"),  # record keys are job_id/record_id
        ("job..1", "'job..1'"),
    ],
)
def test_a_job_id_that_is_not_a_name_is_a_usage_error_before_anything_is_sent(
    command: str, job_id: str, shown: str, tmp_path: Path
) -> None:
    good = tmp_path / "in.txt"
    good.write_text("one line\n")
    args = ["raw.text"] if command == "produce" else []
    done = nearline(command, *args, str(good), "--model", "tiny", f"--job-id={job_id}")
    assert done.returncode == 2, done.stderr
    variable = f"NEARLINE_{command.upper()}_JOB_ID"  # click names the option's variable too
    assert f"Invalid value for '--job-id' (env var: '{variable}'): invalid job id " in done.stderr
    assert shown in done.stderr
    assert "use letters, digits, '.', '_' and '-'" in done.stderr
    assert "did not answer" not in done.stderr  # refused before the broker was asked


@pytest.mark.process
def test_a_job_id_like_a_scheduled_ones_is_accepted() -> None:
    done = nearline("submit", "/dev/null", "--model", "tiny", "--job-id", "Nightly.v2_run-20260101T0000Z")
    assert "--job-id" not in done.stderr, done.stderr


@pytest.mark.process
@pytest.mark.parametrize("command", [["status", "job-x"], ["jobs", "list"], ["dlq", "list"]])
def test_a_port_out_of_range_is_called_invalid_not_refused(command: list[str]) -> None:
    """127.0.0.1:99999 was reported as a broker that refused the connection."""
    done = nearline(*command, "--bootstrap-servers", "127.0.0.1:99999")
    assert done.returncode == 2, done.stderr
    assert "127.0.0.1:99999: invalid port 99999 (a port is 1-65535)" in done.stderr, done.stderr
    assert "refused" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.process
def test_a_max_backlog_of_0_is_a_usage_error(tmp_path: Path) -> None:
    """--max-backlog 0 refused every job, advising to split it "into jobs of at most 0 records"."""
    good = tmp_path / "in.txt"
    good.write_text("one line\n")
    done = nearline("submit", str(good), "--model", "tiny", "--max-backlog", "0")
    assert done.returncode == 2 and "0 is not in the range x>=1" in done.stderr, done.stderr
    assert "at most 0 records" not in done.stderr


@pytest.mark.process
@pytest.mark.parametrize(
    ("name", "forced", "named"),
    [("x.parquet", "jsonl", "parquet"), ("x.arrow", "parquet", "arrow"), ("x.jsonl", "arrow", "jsonl")],
)
def test_an_output_format_that_contradicts_the_file_name_is_a_usage_error(
    name: str, forced: str, named: str, tmp_path: Path
) -> None:
    """-o x.parquet --output-format jsonl wrote JSON Lines into a .parquet."""
    done = nearline("results", "job-x", "-o", str(tmp_path / name), "--output-format", forced)
    assert done.returncode == 2, done.stderr
    assert f"{name} names {named} but --output-format says {forced}" in done.stderr, done.stderr
    assert not (tmp_path / name).exists()


@pytest.mark.process
@pytest.mark.parametrize("text", ["abc", "1:", ":5", "1:2:3", "1:x", "1.0:2", "1:²"])
@pytest.mark.parametrize("verb", ["show", "replay"])
def test_a_dead_letter_id_that_is_not_partition_offset_is_a_usage_error(verb: str, text: str) -> None:
    """`dlq show abc` exited 1, "no dead letter at abc", as if it had looked (#40, 13)."""
    done = nearline("dlq", verb, "2:17", text)
    assert done.returncode == 2, done.stderr
    assert f"{text!r} is not a dead letter id: PARTITION:OFFSET, e.g. 2:17" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not done.stdout


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("4096", "engine CPUs 4096: not CPUs of this host"),
        ("3-1", "'3-1' is not a range of CPU ids"),
        ("first", "'first' is not a CPU list"),
        ("every", "none left for the worker's own"),
    ],
)
def test_engine_cpus_not_of_this_host_or_leaving_it_none_are_a_usage_error_before_any_work(
    value: str, message: str
) -> None:
    from click.testing import CliRunner

    from jobs.cli.main import cli
    from runtime.cpus import host_cpu_ids

    if value == "every":
        value = ",".join(str(cpu) for cpu in sorted(host_cpu_ids()))
    command = ["worker", "gpu", "--model", "tiny", "--engine-cpus", value]
    done = CliRunner().invoke(cli, command, env={"NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    assert done.exit_code == 2 and message in done.output, done.output
