"""A secured Apache Kafka (tests/support/kafka_security.py): SASL_SSL with SCRAM-SHA-512 logins
over TLS, a mutual-TLS listener, and Kafka's StandardAuthorizer, where no ACL means denied.
A Kafka that says no gets a clear answer, each kind with its own exit code, within seconds; the
ACLs docs/deploy.md lists for each worker kind are applied as written and are enough to run a
job through every worker kind; no password or key password shows anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import ResourceType

from jobs.exit_codes import ExitCode
from jobs.launch.local import WorkerProcess, spawn_worker, stop_all
from kafka_io.groups import live_groups
from kafka_io.settings import ENV_BOOTSTRAP, ENV_KAFKA_PREFIX
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import ENV_NAMESPACE, Topics
from model_repository.folders import ENV_MODEL_REPOSITORY
from tests.support.apache_kafka import ApacheKafka, server_port
from tests.support.inputs import example_lines, write_jsonl
from tests.support.kafka_acls import apply_documented_acls, grant_acls, revoke_acls
from tests.support.kafka_security import TLS_CLIENT_DN, Security, kafka_env
from tests.support.tiny_model import TinyModel
from tests.support.webhook_receiver import Receiver, wait_until

# one secured node for the module's tests: in one test process, not one started in each
pytestmark = pytest.mark.xdist_group("secured-kafka")

KINDS = ["preprocess", "gpu", "scheduler", "notifier", "cli"]
USERS = [f"nearline-{kind}" for kind in KINDS] + ["nearline-noacl"]
# How soon a refusal must be said: librdkafka's request timeout (15 s) and more; measured ~1-2 s
REFUSAL_BOUND_S = 30.0


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    folder = tmp_path_factory.mktemp("secured-kafka")
    broker = ApacheKafka.start(folder, security=Security.make(folder / "tls", USERS))
    try:
        yield broker
    finally:
        broker.stop()


def security_of(broker: ApacheKafka) -> Security:
    assert broker.security is not None
    return broker.security


@dataclass
class Secured:
    """One namespace on the secured node: the CLI and workers of each principal, their logs."""

    broker: ApacheKafka
    topics: Topics
    repository: Path
    logs: Path
    workers: list[WorkerProcess] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)  # everything every command printed

    def env(self, kafka: dict[str, Any]) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_KAFKA_PREFIX)}
        return {
            **base,
            ENV_BOOTSTRAP: self.broker.bootstrap_servers,
            ENV_NAMESPACE: self.topics.namespace,
            ENV_MODEL_REPOSITORY: str(self.repository),
            **kafka_env(kafka),
        }

    def login(self, user: str, **overrides: Any) -> dict[str, Any]:
        return security_of(self.broker).sasl_client(user, **overrides)

    def cli(
        self, kafka: dict[str, Any], *args: str, servers: str | None = None
    ) -> tuple[subprocess.CompletedProcess[str], float]:
        env = self.env(kafka)
        if servers is not None:
            env[ENV_BOOTSTRAP] = servers
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", *args], env=env, capture_output=True, text=True, timeout=180
        )
        self.outputs.append(done.stdout + done.stderr)
        return done, time.monotonic() - started

    def start(self, kind: str, *args: str, kafka: dict[str, Any] | None = None) -> WorkerProcess:
        worker = spawn_worker(
            kind,
            [kind, *args],
            bootstrap_servers=self.broker.bootstrap_servers,
            namespace=self.topics.namespace,
            repository=self.repository,
            log_path=self.logs / f"{kind}-{len(self.workers)}.log",
            extra_env={
                "TMPDIR": str(self.logs),
                **kafka_env(kafka if kafka is not None else self.login(f"nearline-{kind.split()[0]}")),
            },
        )
        self.workers.append(worker)
        return worker

    def apply_acls(self, kinds: list[str]) -> None:
        variables = {"NS": self.topics.namespace, "KAFKA": self.broker.bootstrap_servers}
        apply_documented_acls(self.broker.admin_settings(), variables, kinds)


@pytest.fixture
def namespace(secured: ApacheKafka, tiny: TinyModel, model_repository: Path, tmp_path: Path) -> Iterator[Secured]:
    s = Secured(secured, Topics(f"s{time.monotonic_ns() % 10**9}"), model_repository, tmp_path / "logs")
    s.logs.mkdir()
    try:
        yield s
    finally:
        stop_all([w for w in s.workers if w.process.poll() is None])


def assert_no_secret(s: Secured) -> None:
    """No password or key password in any command's output or any worker's log."""
    texts = [*s.outputs, *(w.log_path.read_text(errors="replace") for w in s.workers if w.log_path.is_file())]
    for secret in security_of(s.broker).secrets():
        leaks = [t for t in texts if secret in t]
        assert not leaks, f"a secret was printed: {leaks[0][:500]}"


def registered_job(s: Secured) -> str:
    """A job registered by the super user, so that there is something a principal might be told is not there."""
    admin = s.broker.admin_settings()
    done, _ = s.cli(admin.extra, "submit", str(write_jsonl(s.logs / "seed.jsonl", example_lines(3))), "--model", "tiny")
    assert done.returncode == 0, done.stderr
    ensure_topics(admin, [TopicSpec(s.topics.schedules), TopicSpec(s.topics.dead_letters)])
    return done.stdout.strip()


@pytest.mark.timeout(300)
def test_a_wrong_password_an_unknown_user_or_mechanism_is_a_refused_login_said_in_seconds(namespace: Secured) -> None:
    s = namespace
    for kafka in (
        s.login("nearline-cli", password="not-the-password"),
        {**s.login("nearline-cli"), "sasl.username": "nobody-of-that-name"},
        {**s.login("nearline-cli"), "sasl.mechanism": "SCRAM-SHA-256"},
    ):
        for args in (
            ("jobs", "list"),
            ("submit", str(write_jsonl(s.logs / "in.jsonl", example_lines(2))), "--model", "tiny"),
        ):
            done, took = s.cli(kafka, *args)
            assert done.returncode == ExitCode.NOT_AUTHENTICATED, done.stderr
            assert f"Kafka refused the login of User:{kafka['sasl.username']}" in done.stderr
            assert "did not answer" not in done.stderr and "Traceback" not in done.stderr
            assert took < REFUSAL_BOUND_S
    # each worker kind exits with the same code, at start, rather than waiting it out as an outage
    kinds: dict[str, list[str]] = {"gpu": ["--model", "tiny"], "scheduler": [], "notifier": [], "preprocess": []}
    for kind, flags in kinds.items():
        worker = s.start(kind, *flags, kafka=s.login(f"nearline-{kind}", password="wrong"))
        assert worker.process.wait(timeout=120) == ExitCode.NOT_AUTHENTICATED, worker.log_path.read_text()
        assert f"Kafka refused the login of User:nearline-{kind}" in worker.log_path.read_text()
    assert_no_secret(s)


@pytest.mark.timeout(300)
def test_an_unknown_ca_a_host_name_mismatch_or_no_client_certificate_is_a_tls_failure(namespace: Secured) -> None:
    s = namespace
    rogue = s.login("nearline-cli", ca=security_of(s.broker).rogue_ca)
    done, took = s.cli(rogue, "jobs", "list")
    assert done.returncode == ExitCode.TLS_FAILED, done.stderr
    assert "TLS handshake with Kafka failed for User:nearline-cli" in done.stderr
    assert "certificate verify failed" in done.stderr
    assert took < REFUSAL_BOUND_S
    # a host name the broker's certificate does not hold (its SANs: 127.0.0.1 and localhost): the
    # same address written as one number, which the resolver takes and the certificate check does not
    done, took = s.cli(s.login("nearline-cli"), "jobs", "list", servers=f"2130706433:{s.broker.port}")
    assert done.returncode == ExitCode.TLS_FAILED, done.stderr
    assert "TLS handshake with Kafka failed for User:nearline-cli" in done.stderr
    assert took < REFUSAL_BOUND_S
    # the mutual-TLS listener without a client certificate: the broker refuses the handshake
    bare = {"security.protocol": "SSL", "ssl.ca.location": str(security_of(s.broker).ca)}
    done, took = s.cli(bare, "jobs", "list", servers=s.broker.tls_bootstrap_servers)
    assert done.returncode == ExitCode.TLS_FAILED, done.stderr
    assert took < REFUSAL_BOUND_S
    preprocess = s.start("preprocess", kafka=rogue)
    assert preprocess.process.wait(timeout=120) == ExitCode.TLS_FAILED
    assert_no_secret(s)


@pytest.mark.timeout(300)
def test_a_login_without_acls_is_told_not_authorized_never_none_or_a_traceback(namespace: Secured) -> None:
    """The audit's reproduction: without ACLs, "0 dead letters", "no jobs", "no schedules" (exit
    0), "no job", "no topic" (exit 2) and a traceback from submit."""
    s = namespace
    job_id = registered_job(s)
    noacl = s.login("nearline-noacl")
    ns = s.topics.namespace
    said = {
        ("dlq", "list"): f"Describe topic {ns}.dead.letters",
        ("jobs", "list"): f"Describe topic {ns}.jobs",
        ("schedule", "list"): f"Describe topic {ns}.schedules",
        ("status", job_id): f"Describe topic {ns}.jobs",
        ("offsets", "show", "--group", "gpu.tiny", "--topic", "results"): f"Describe topic {ns}.results",
        ("results", job_id, "-o", str(s.logs / "out.jsonl")): "not authorized",
        ("submit", str(write_jsonl(s.logs / "in.jsonl", example_lines(2))), "--model", "tiny"): "may not",
    }
    for args, what in said.items():
        done, took = s.cli(noacl, *args)
        assert done.returncode == ExitCode.NOT_AUTHORIZED, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("error: not authorized: User:nearline-noacl "), (args, done.stderr)
        assert what in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and done.stdout == "", (args, done.stdout, done.stderr)
        assert took < REFUSAL_BOUND_S
    # every worker kind too: not a retried outage, nor a crash
    for kind, flags in {"scheduler": [], "notifier": [], "preprocess": [], "gpu": ["--model", "tiny"]}.items():
        worker = s.start(kind, *flags, kafka=noacl)
        assert worker.process.wait(timeout=120) == ExitCode.NOT_AUTHORIZED, worker.log_path.read_text()
        assert "not authorized: User:nearline-noacl" in worker.log_path.read_text()
    # a certificate's principal is its subject, as Kafka names it
    done, _ = s.cli(security_of(s.broker).tls_client(), "jobs", "list", servers=s.broker.tls_bootstrap_servers)
    assert done.returncode == ExitCode.NOT_AUTHORIZED, done.stderr
    assert f"not authorized: User:{TLS_CLIENT_DN} may not Describe topic {ns}.jobs" in done.stderr
    assert_no_secret(s)


@pytest.mark.timeout(400)
def test_an_exactly_once_gpu_worker_without_a_transactional_id_acl_exits_not_authorized(namespace: Secured) -> None:
    s = namespace
    s.apply_acls(["gpu"])  # not the gpu-exactly-once line
    gpu = s.start("gpu", "--model", "tiny", "--exactly-once", "--instance-id", "a")
    assert gpu.process.wait(timeout=300) == ExitCode.NOT_AUTHORIZED
    log = gpu.log_path.read_text()
    assert f"not authorized: User:nearline-gpu may not Write transactional id {s.topics.namespace}.gpu.tiny.a" in log
    assert "Traceback" not in log
    assert_no_secret(s)


@pytest.mark.timeout(300)
def test_a_principal_that_may_read_but_not_write_is_told_so_by_submit(namespace: Secured) -> None:
    s = namespace
    registered_job(s)
    grant = [
        "kafka-acls.sh --add --allow-principal User:nearline-noacl --operation Describe --operation DescribeConfigs"
        ' --operation Read --topic "$NS." --resource-pattern-type prefixed',
        "kafka-acls.sh --add --allow-principal User:nearline-noacl --operation Describe --group nearline-"
        " --resource-pattern-type prefixed",
    ]
    grant_acls(s.broker.admin_settings(), grant, {"NS": s.topics.namespace})
    listed, _ = s.cli(s.login("nearline-noacl"), "jobs", "list")
    assert listed.returncode == 0, listed.stderr  # it may read
    done, took = s.cli(
        s.login("nearline-noacl"), "submit", str(write_jsonl(s.logs / "in.jsonl", example_lines(2))), "--model", "tiny"
    )
    assert done.returncode == ExitCode.NOT_AUTHORIZED, done.stderr
    assert done.stderr.startswith("error: not authorized: User:nearline-noacl "), done.stderr
    assert "Traceback" not in done.stderr
    assert f"may not Write topic {s.topics.namespace}.raw.text" in done.stderr, done.stderr
    assert took < REFUSAL_BOUND_S
    assert_no_secret(s)


@pytest.mark.timeout(400)
def test_a_gpu_worker_whose_read_acl_is_revoked_exits_not_authorized_instead_of_waiting(namespace: Secured) -> None:
    s = namespace
    s.apply_acls(["gpu"])
    gpu = s.start("gpu", "--model", "tiny")
    group = s.topics.gpu_group("tiny")
    wait_until(lambda: bool(live_groups(s.broker.admin_settings(), [group])), 240, "the GPU worker joined its group")
    assert revoke_acls(s.broker.admin_settings(), "User:nearline-gpu", ResourceType.TOPIC) > 0
    assert gpu.process.wait(timeout=120) == ExitCode.NOT_AUTHORIZED, gpu.log_path.read_text()[-3000:]
    log = gpu.log_path.read_text()
    assert "not authorized: User:nearline-gpu may not Read topic" in log and "Traceback" not in log, log[-3000:]
    assert_no_secret(s)


@pytest.mark.timeout(400)
def test_a_preprocess_worker_whose_acls_are_revoked_exits_not_authorized_instead_of_restarting_into_it(
    namespace: Secured,
) -> None:
    s = namespace
    s.apply_acls(["preprocess"])
    preprocess = s.start("preprocess")
    group = s.topics.preprocess_app_id
    wait_until(lambda: bool(live_groups(s.broker.admin_settings(), [group])), 240, "the preprocess worker joined")
    assert revoke_acls(s.broker.admin_settings(), "User:nearline-preprocess", ResourceType.TOPIC) > 0
    assert preprocess.process.wait(timeout=120) == ExitCode.NOT_AUTHORIZED, preprocess.log_path.read_text()[-3000:]
    log = preprocess.log_path.read_text()
    assert "not authorized: User:nearline-preprocess" in log
    assert "Traceback" not in log, log[-3000:]  # said in a line, not as faust's crash
    assert_no_secret(s)


def next_minute(now: datetime) -> datetime:
    return now.replace(second=0, microsecond=0) + timedelta(minutes=1)


@pytest.mark.long
@pytest.mark.timeout(600)
def test_a_job_runs_through_every_worker_kind_with_only_the_documented_acls(
    namespace: Secured, receiver: Receiver, tmp_path: Path
) -> None:
    s = namespace
    s.apply_acls(["preprocess", "gpu", "gpu-exactly-once", "scheduler", "notifier", "cli"])
    cli = s.login("nearline-cli")
    metrics_port = server_port()
    s.start("preprocess")
    s.start("gpu", "--model", "tiny", "--exactly-once", "--instance-id", "a", "--metrics-port", str(metrics_port))
    s.start("scheduler", "--instance-id", "a")
    s.start("notifier", "--instance-id", "a", "--allow-private-targets")

    rows = example_lines(40)
    submitted, _ = s.cli(
        cli,
        *("submit", str(write_jsonl(tmp_path / "in.jsonl", rows)), "--model", "tiny", "--wait"),
        *("--notify", receiver.url("/done"), "--timeout-s", "240"),
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().splitlines()[0]
    results, _ = s.cli(cli, "results", job_id, "-o", str(tmp_path / "out.jsonl"))
    assert results.returncode == 0, results.stderr
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(line["id"] for line in lines) == sorted(r["id"] for r in rows)
    wait_until(lambda: bool(receiver.to("/done")), 120, "the notifier's POST of the ended job")

    # the scheduler submits a job of its own at the next minute, through the same workers
    drop = tmp_path / "drop"
    drop.mkdir()
    write_jsonl(drop / "tick.jsonl", example_lines(5))
    added, _ = s.cli(
        cli, "schedule", "add", "minutely", "--cron", "* * * * *", "--input", str(drop / "*.jsonl"), "--model", "tiny"
    )
    assert added.returncode == 0, added.stderr
    tick = next_minute(datetime.now(UTC))

    def scheduled_job_done() -> bool:
        listed, _ = s.cli(cli, "jobs", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        jobs = json.loads(listed.stdout or "[]")
        return any(j["job_id"] != job_id and j["state"] == "completed" for j in jobs)

    wait_until(scheduled_job_done, (tick - datetime.now(UTC)).total_seconds() + 150, "the scheduled job completed")
    for w in s.workers:
        assert w.process.poll() is None, f"{w.name} exited: {w.log_path.read_text()[-2000:]}"

    status, _ = s.cli(cli, "status", job_id, "--json")
    assert status.returncode == 0, status.stderr
    for args in (("--help",), ("worker", "gpu", "--help"), ("worker", "notifier", "--help"), ("submit", "--help")):
        s.cli(cli, *args)
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
        s.outputs.append(answer.read().decode())
    s.outputs.extend(p.body.decode(errors="replace") for p in receiver.posts)
    assert_no_secret(s)
