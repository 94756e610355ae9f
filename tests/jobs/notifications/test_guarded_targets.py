"""What a submitter's URL can reach and learn, with real notifiers on the real broker: a private
target is refused by default (given up, with the reason in `status` and `jobs list --json`) and
delivered when the operator allows it; a receiver's answer is shown with its control characters
escaped, also from records written before they were escaped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from click.testing import CliRunner

from jobs.cli.main import cli
from jobs.notifications.claims import ATTEMPT, CLAIM, kafka_key
from jobs.notifications.delivery import RetrySettings
from jobs.notifications.notifier import Notifier, NotifierSettings
from jobs.notifications.targets import TargetSettings
from jobs.registry import register
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord
from kafka_io.settings import KafkaSettings
from kafka_io.topics import ensure_topics, notifications_topic
from kafka_io.topology import Topics
from schemas import Job, JobTerms, Notification, encode, now_us
from tests.support.notification_status import notification_of
from tests.support.notifiers import running_notifiers
from tests.support.webhook_receiver import Receiver, wait_until

REFUSED = (
    "127.0.0.1 resolves to a loopback address (127.0.0.1), which a webhook may not reach; the notifier's "
    "operator can allow it with --allow-private-targets or --allow-target CIDR"
)


def ended_job(job_id: str, url: str) -> Job:
    at = now_us()
    return Job(
        job_id, "tiny", "in.jsonl", "text", 0, at, submission=at, terms=JobTerms(notify=url), error="input missing"
    )


@contextmanager
def running(settings: KafkaSettings, topics: Topics, name: str, targets: TargetSettings) -> Iterator[Notifier]:
    retry = RetrySettings(first_retry_s=0.2, max_retry_s=0.5)
    config = NotifierSettings(name, retry, timeout_s=5, settle_s=0, poll_s=0.05, targets=targets)
    with running_notifiers(settings, topics, config) as [notifier]:
        yield notifier


def cli_env(settings: KafkaSettings, topics: Topics) -> dict[str, str]:
    return {"NEARLINE_BOOTSTRAP_SERVERS": settings.bootstrap_servers, "NEARLINE_NAMESPACE": topics.namespace}


def test_a_private_target_is_refused_by_default_and_delivered_when_the_operator_allows_it(
    settings: KafkaSettings, topics: Topics, receiver: Receiver
) -> None:
    register(settings, topics, ended_job("inside", receiver.url("/inside")))
    with running(settings, topics, "guarded", TargetSettings()):
        wait_until(lambda: (notification_of(settings, topics, "inside") or {}).get("state") == "gave_up", 30, "refusal")
    refused = notification_of(settings, topics, "inside")
    assert refused is not None and (refused["attempts"], refused["last_error"]) == (1, REFUSED)
    assert receiver.posts == []  # not retried, never connected
    env = cli_env(settings, topics)
    said = CliRunner().invoke(cli, ["status", "inside"], env=env)
    assert f"webhook: {receiver.url('/inside')}: gave up after 1 attempt: {REFUSED}" in said.output, said.output
    listed = json.loads(CliRunner().invoke(cli, ["jobs", "list", "--json"], env=env).output)
    assert [row["notification"]["last_error"] for row in listed if row["job_id"] == "inside"] == [REFUSED]

    register(settings, topics, ended_job("allowed", receiver.url("/allowed")))
    with running(settings, topics, "trusting", TargetSettings.of(False, ["127.0.0.0/8"])):
        wait_until(lambda: (notification_of(settings, topics, "allowed") or {}).get("state") == "delivered", 30, "sent")
    assert [p.status for p in receiver.to("/allowed")] == [200]
    assert receiver.to("/inside") == []  # given up stays given up


def test_a_receivers_answer_is_shown_with_its_control_characters_escaped(
    settings: KafkaSettings, topics: Topics, receiver: Receiver
) -> None:
    receiver.answers["/hostile"] = [500]
    receiver.texts["/hostile"] = b"\x1b]0;pwned\x07\x1b[2Jgone"
    register(settings, topics, ended_job("hostile", receiver.url("/hostile")))
    with running(settings, topics, "escaping", TargetSettings(allow_private=True)):
        wait_until(lambda: (notification_of(settings, topics, "hostile") or {}).get("state") == "delivered", 30, "sent")
    shown = notification_of(settings, topics, "hostile")
    assert shown is not None
    assert shown["last_error"] == "HTTP 500 Internal Server Error: \\x1b]0;pwned\\x07\\x1b[2Jgone"
    # a record written raw (by a notifier that did not escape) is escaped when shown
    job = ended_job("raw", "http://hooks.example/\x1b[2J")
    register(settings, topics, job)
    ensure_topics(settings, [notifications_topic(topics)])
    sub, at = job.submission or 0, now_us()
    records = [
        Notification("raw", sub, CLAIM, "old", "c1", at, job.terms.notify or "", 60_000),
        Notification(
            "raw", sub, ATTEMPT, "old", "c1", at + 1, job.terms.notify or "", attempts=1, error="\x1b]0;x\x07"
        ),
    ]
    out = [OutRecord(topics.notifications, encode(r), kafka_key(r).encode()) for r in records]
    produce_all(make_producer(settings), out)
    said = CliRunner().invoke(cli, ["status", "raw"], env=cli_env(settings, topics))
    assert said.exit_code == 0, said.output
    assert "\x1b" not in said.output and "\x07" not in said.output
    assert "webhook: http://hooks.example/\\x1b[2J: failing, retried after 1 attempt: \\x1b]0;x\\x07" in said.output
