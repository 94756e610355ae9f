"""Receivers that never finish an answer, against real notifiers on the real broker: each POST is
cut at --timeout-s, one slow receiver holds one slot at most while other jobs are delivered, a
claim the notifier cannot serve is not renewed (another notifier takes it over), and a notifier
process stops within its timeout after SIGTERM, its deliveries signed and no secret printed."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook

from jobs.notifications.claims import key_of
from jobs.notifications.delivery import RetrySettings
from jobs.notifications.notifier import NotifierSettings
from jobs.notifications.status import load_notifications
from jobs.notifications.targets import TargetSettings
from jobs.registry import register
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from schemas import Job, JobTerms, now_us
from tests.support.notification_status import notification_of
from tests.support.notifiers import running_notifiers as running
from tests.support.webhook_receiver import Dribbler, Receiver, wait_until
from tests.support.webhook_receiver import dribbler as dribbler

LOOPBACK = TargetSettings(allow_private=True)


def ended_job(job_id: str, url: str) -> Job:
    """A job that failed at submission: ended at once, so its webhook is due."""
    at = now_us()
    return Job(
        job_id, "tiny", "in.jsonl", "text", 0, at, submission=at, terms=JobTerms(notify=url), error="input missing"
    )


def config(name: str, timeout_s: float, concurrency: int, lease_s: float = 60.0) -> NotifierSettings:
    retry = RetrySettings(first_retry_s=0.2, max_retry_s=0.5)
    return NotifierSettings(
        name, retry, timeout_s=timeout_s, lease_s=lease_s, settle_s=0, poll_s=0.05, concurrency=concurrency,
        targets=LOOPBACK,
    )  # fmt: skip


def shown(settings: KafkaSettings, topics: Topics, job_id: str) -> dict[str, object]:
    return notification_of(settings, topics, job_id) or {}


def test_a_dribbling_receiver_is_cut_at_the_timeout_and_holds_one_slot_while_others_are_delivered(
    settings: KafkaSettings, topics: Topics, receiver: Receiver, dribbler: Dribbler
) -> None:
    """Three jobs whose receiver answers `200 OK` and then a header line every 0.3 s, forever, and
    four whose receiver answers at once, on a notifier with two POST slots."""
    dribbler.every_s = 0.3
    slow = [ended_job(f"slow-{i}", dribbler.url(f"/slow-{i}")) for i in range(3)]
    fast = [ended_job(f"fast-{i}", receiver.url(f"/fast-{i}")) for i in range(4)]
    for job in (*slow, *fast):
        register(settings, topics, job)

    def state(job: Job) -> object:
        return shown(settings, topics, job.job_id).get("state")

    with running(settings, topics, config("notifier-a", timeout_s=1.5, concurrency=2)):
        wait_until(lambda: all(state(j) == "delivered" for j in fast), 60, "the fast receiver's deliveries")
        wait_until(lambda: all(state(j) == "failing" for j in slow), 60, "each slow POST cut")
    for job in slow:
        told = shown(settings, topics, job.job_id)
        assert told["state"] == "failing"
        assert told["last_error"] == f"no HTTP answer from 127.0.0.1:{dribbler.port} within 1.5 s"
    assert [len(receiver.to(f"/fast-{i}")) for i in range(4)] == [1, 1, 1, 1]
    assert dribbler.most_open == 1  # the slow receiver held one of the two slots, never both
    # each connection ended soon after the deadline; uncut, each would have lasted as long as the test
    assert dribbler.durations and max(dribbler.durations) < 20, dribbler.durations


def test_a_claim_the_notifier_cannot_serve_is_not_renewed_and_another_notifier_takes_it_over(
    settings: KafkaSettings, topics: Topics, dribbler: Dribbler
) -> None:
    """Notifier A, with one slot, owns two notifications to a dribbling receiver: while one POST
    runs, the other waits for the slot and is not renewed, so notifier B takes it over after A's
    1-second lease, while A still runs."""
    jobs = [ended_job(f"jam-{i}", dribbler.url(f"/jam-{i}")) for i in range(2)]
    for job in jobs:
        register(settings, topics, job)
    keys = [key_of(job) for job in jobs]
    with running(settings, topics, config("notifier-a", timeout_s=3, concurrency=1, lease_s=1)) as [a]:

        def owned_by_a() -> bool:
            return all((s := a.log.get(k)) is not None and s.owner == "notifier-a" for k in keys)

        wait_until(owned_by_a, 30, "notifier-a claiming both")
        with running(settings, topics, config("notifier-b", timeout_s=3, concurrency=2, lease_s=1)):

            def taken_over() -> bool:
                states = load_notifications(settings, topics).states
                return any(states[k].owner == "notifier-b" and states[k].takeovers >= 1 for k in keys if k in states)

            wait_until(taken_over, 30, "notifier-b taking over the notification notifier-a could not serve")


@pytest.mark.process
@pytest.mark.timeout(180)
def test_a_notifier_process_signs_its_posts_stops_within_its_timeout_after_sigterm_and_prints_no_secret(
    settings: KafkaSettings, topics: Topics, receiver: Receiver, dribbler: Dribbler, tmp_path: Path
) -> None:
    new = "whsec_" + base64.b64encode(b"the new key, 24 bytes lo").decode()
    old = "whsec_" + base64.b64encode(b"the old key of 32 bytes, exactly").decode()
    secret_file = tmp_path / "signing-secrets"
    secret_file.write_text(f"# the old one, until every receiver has the new\n{old}\n")
    hidden = f"http://hook-user:pa55word@127.0.0.1:{receiver.port}/told?token=t0k3n"
    register(settings, topics, ended_job("told", hidden))
    register(settings, topics, ended_job("stuck", dribbler.url("/stuck?token=t0k3n")))
    env = {
        **os.environ,
        "NEARLINE_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "NEARLINE_NAMESPACE": topics.namespace,
        "NEARLINE_WORKER_NOTIFIER_SIGNING_SECRET": new,
    }
    command = [sys.executable, "-m", "jobs.cli", "worker", "notifier", "--instance-id", "signer"]
    options = ["--timeout-s", "2", "--allow-private-targets", "--signing-secret-file", str(secret_file)]
    notifier = subprocess.Popen([*command, *options], env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(receiver.to("/told?token=t0k3n")) == 1, 60, "the signed delivery")
        wait_until(lambda: dribbler.open_now == 1, 60, "a POST to the dribbling receiver under way")
        notifier.send_signal(signal.SIGTERM)
        _, stderr = notifier.communicate(timeout=30)  # uncut, the POST would last as long as the dribbling
    finally:
        if notifier.poll() is None:
            notifier.kill()
            notifier.communicate()
    assert notifier.returncode == 0, stderr
    assert "notifier signer stopped" in stderr and "POSTs signed with 2 secret(s)" in stderr
    [told] = receiver.to("/told?token=t0k3n")
    for secret in (new, old):
        assert Webhook(secret).verify(told.body, told.headers)["job_id"] == "told"
    assert told.headers["Authorization"] == "Basic " + base64.b64encode(b"hook-user:pa55word").decode()
    assert f"delivered to http://127.0.0.1:{receiver.port}/told (HTTP 200, try 1)" in stderr
    for secret in (new[6:], old[6:], "pa55word", "t0k3n"):
        assert secret not in stderr
