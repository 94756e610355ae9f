"""A --notify URL as others see it: `status`, `jobs list --json`, `status --watch --json` and
`schedule list` show its host and path but neither the password in its userinfo nor the values in
its query string, which anyone who may read the registry would otherwise read."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from jobs.cli.main import cli
from jobs.notifications.delivery import DeliverySettings, post, shown_url
from jobs.notifications.signing import SigningKeys
from jobs.notifications.targets import TargetSettings
from jobs.registry import register
from kafka_io.settings import ENV_BOOTSTRAP, KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics
from kafka_io.topology import ENV_NAMESPACE, Topics
from model_repository.folders import ENV_MODEL_REPOSITORY
from schemas import Job, JobTerms, now_us
from tests.support.tiny_model import TinyModel

URL = "https://alice:s3cr3t-pw@hooks.example.com:8443/in/box?token=t0k3n-value&team=crimson9#frag-secret"
SHOWN = "https://***@hooks.example.com:8443/in/box?token=***&team=***#***"
SECRETS = ("alice", "s3cr3t-pw", "t0k3n-value", "crimson9", "frag-secret")


def test_a_url_is_shown_without_userinfo_query_values_or_fragment() -> None:
    assert shown_url(URL) == SHOWN
    assert shown_url("http://hooks.example/plain/path") == "http://hooks.example/plain/path"
    assert shown_url("http://user@[::1]:9/p?bare-token") == "http://***@[::1]:9/p?***"
    assert shown_url("http://hooks.example/\x1b[2J?k=\x07") == "http://hooks.example/\\x1b[2J?k=***"
    assert shown_url("http://u:pw@hooks.example:port/?t=x") == "http://***@hooks.example:port/?t=***"
    assert shown_url("http://u:pw@[::1/") == shown_url("no scheme") == "(a URL that does not parse)"


def test_status_jobs_list_and_schedule_list_show_no_secret_of_a_url(
    settings: KafkaSettings, topics: Topics, tiny: TinyModel, model_repository: Path, tmp_path: Path
) -> None:
    ensure_topics(settings, [TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    at = now_us()
    register(
        settings,
        topics,
        Job("job-u", "tiny", "in.jsonl", "text", 0, at, submission=at, terms=JobTerms(notify=URL), error="x"),
    )
    env = {ENV_BOOTSTRAP: settings.bootstrap_servers, ENV_NAMESPACE: topics.namespace}
    env[ENV_MODEL_REPOSITORY] = str(model_repository)
    runner = CliRunner()
    said = {
        "status": runner.invoke(cli, ["status", "job-u"], env=env),
        "status --json": runner.invoke(cli, ["status", "job-u", "--json"], env=env),
        "status --watch --json": runner.invoke(cli, ["status", "job-u", "--watch", "--json"], env=env),
        "jobs list --json": runner.invoke(cli, ["jobs", "list", "--json"], env=env),
    }
    schedule = ["schedule", "add", "hourly", "--cron", "0 * * * *", "--input", str(tmp_path / "*.jsonl")]
    added = runner.invoke(cli, [*schedule, "-m", "tiny", "--notify", URL], env=env)
    assert added.exit_code == 0, added.output
    said["schedule list --json"] = runner.invoke(cli, ["schedule", "list", "--json"], env=env)
    for command, done in said.items():
        assert done.exit_code == 0, (command, done.output)
        assert not [s for s in SECRETS if s in done.output], (command, done.output)
    assert f"webhook: {SHOWN}: told when the job ends" in said["status"].output
    document = json.loads(said["status --json"].output)
    assert (document["notify"], document["notification"]["url"]) == (SHOWN, SHOWN)
    assert json.loads(said["status --watch --json"].output.splitlines()[-1])["notify"] == SHOWN
    listed = [row for row in json.loads(said["jobs list --json"].output) if row["job_id"] == "job-u"]
    assert [(row["notify"], row["notification"]["url"]) for row in listed] == [(SHOWN, SHOWN)]
    assert [row["notify"] for row in json.loads(said["schedule list --json"].output)] == [SHOWN]


def test_a_url_that_cannot_be_a_webhook_is_given_up_without_its_secrets_in_the_reason() -> None:
    # the reason is the notification's last error, which status shows; no request is made
    config = DeliverySettings(1, TargetSettings(), SigningKeys())
    for url, says in [
        ("ftp://alice:s3cr3t-pw@hooks.example.com/in?token=t0k3n-value", "must start with http:// or https://"),
        ("http://alice:s3cr3t-pw@hooks.example.com:99999/?token=t0k3n-value", "is not a URL: Port out of range"),
        ("http://alice:s3cr3t-pw@hooks.example.com:nope/?token=t0k3n-value", "is not a URL"),
    ]:
        answer = post(url, b"{}", "job/1", config)
        assert (answer.delivered, answer.permanent) == (False, True)
        assert says in (answer.error or "") and "hooks.example.com" in (answer.error or ""), answer.error
        assert not [s for s in SECRETS if s in (answer.error or "")], answer.error
