"""Notifiers on the real broker with a loopback receiver: one delivered POST per ended job with two
notifiers running, a refused first attempt retried, failures shown, no second POST after a
restart, and a silent owner's notification taken over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from jobs.notifications.claims import CLAIM, DELIVERED, kafka_key, key_of
from jobs.notifications.delivery import RetrySettings, user_agent
from jobs.notifications.metrics import PrometheusNotifierMetrics
from jobs.notifications.notifier import Notifier, NotifierSettings
from jobs.notifications.status import load_notifications
from jobs.notifications.targets import TargetSettings
from jobs.registry import register
from kafka_io.broker import EmbeddedBroker
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord, job_record
from kafka_io.settings import KafkaSettings
from kafka_io.topics import TopicSpec, ensure_topics, notifications_topic
from kafka_io.topology import Topics
from schemas import InferenceResult, Job, JobTerms, Notification, decode, encode, now_us
from tests.support.notification_status import notification_of
from tests.support.notifiers import running_notifiers
from tests.support.webhook_receiver import Receiver, wait_until


def quick(name: str) -> NotifierSettings:
    """Retries 0.2 s apart (at most 0.5 s), told of a cancel at once, stepping every 50 ms; the
    receivers are on loopback, so private targets are allowed."""
    retry = RetrySettings(first_retry_s=0.2, max_retry_s=0.5)
    return NotifierSettings(
        name, retry, timeout_s=5, settle_s=0, poll_s=0.05, targets=TargetSettings(allow_private=True)
    )


def running(settings: KafkaSettings, topics: Topics, *names: str) -> AbstractContextManager[list[Notifier]]:
    return running_notifiers(settings, topics, *(quick(name) for name in names))


def step_until(notifier: Notifier, done: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Step the notifier by hand (no thread) until `done`."""

    def stepped() -> bool:
        notifier.step()
        return done()

    wait_until(stepped, timeout_s, what)


def a_job(job_id: str, url: str, total: int = 2, **fields: object) -> Job:
    at = now_us()
    return Job(job_id, "tiny", "in.jsonl", "text", total, at, submission=at, terms=JobTerms(notify=url), **fields)  # type: ignore[arg-type]


def write_results(settings: KafkaSettings, topics: Topics, job: Job) -> None:
    """A result for each of the job's records, as GPU workers write them."""
    ensure_topics(settings, [TopicSpec(topics.results), TopicSpec(topics.dead_letters)])
    sub = job.submission or 0
    stamps = {"submitted": sub}
    produced = [
        job_record(
            topics.results,
            encode(InferenceResult(job.job_id, f"r{i}", i, "tiny", "1", (), "b", 1, timestamps=stamps)),
            job.job_id,
            f"r{i}",
            submission=sub,
        )
        for i in range(job.total)
    ]
    produce_all(make_producer(settings, idempotent=False), produced)


def log_records(settings: KafkaSettings, topics: Topics) -> list[Notification]:
    return [decode(m.value, Notification) for m in read_topics(settings, [topics.notifications])]


def delivered(settings: KafkaSettings, topics: Topics, job_id: str) -> bool:
    shown = notification_of(settings, topics, job_id)
    return shown is not None and shown["state"] == "delivered"


def test_two_notifiers_post_once_per_ended_job_after_a_refused_first_attempt(
    settings: KafkaSettings, topics: Topics, receiver: Receiver
) -> None:
    jobs = {
        "failed": a_job("failed", receiver.url("/failed"), total=0, error="input missing"),
        "cancelled": a_job("cancelled", receiver.url("/cancelled"), total=3, cancelled_at=now_us()),
        "running": a_job("running", receiver.url("/running")),  # completes while the notifiers follow it
    }
    for name in (*jobs, "late"):
        receiver.answers[f"/{name}"] = [503]
    for job in jobs.values():
        register(settings, topics, job)
    with running(settings, topics, "notifier-a", "notifier-b") as notifiers:
        wait_until(lambda: len(receiver.to("/failed")) == 2 and len(receiver.to("/cancelled")) == 2, 60, "2 ended")
        # a job whose results came before it was registered (submit registers last): caught up
        jobs["late"] = a_job("late", receiver.url("/late"))
        write_results(settings, topics, jobs["late"])
        register(settings, topics, jobs["late"])
        write_results(settings, topics, jobs["running"])
        keys = [key_of(job) for job in jobs.values()]
        wait_until(
            lambda: all((s := n.log.get(k)) is not None and s.final for n in notifiers for k in keys),
            60,
            "both notifiers reading every notification delivered",
        )
    states = {"failed": "failed", "cancelled": "cancelled", "running": "completed", "late": "completed"}
    for name, job in jobs.items():
        posts = receiver.to(f"/{name}")
        assert [p.status for p in posts] == [503, 200], name  # refused, retried, delivered: once
        for p in posts:
            assert p.headers["Idempotency-Key"] == f"{job.job_id}/{job.submission}"
            assert p.headers["Content-Type"] == "application/json" and p.headers["User-Agent"] == user_agent()
            document = json.loads(p.body)
            assert (document["job_id"], document["state"], document["notify"]) == (name, states[name], job.terms.notify)
        assert posts[0].body == posts[1].body  # the same document on every retry
        shown = notification_of(settings, topics, name)
        assert shown is not None
        assert (shown["state"], shown["attempts"], shown["http_status"], shown["last_error"]) == (
            "delivered",
            2,
            200,
            "HTTP 503 Service Unavailable: busy, try later",
        )
    assert json.loads(receiver.to("/running")[1].body)["counts"]["inferred"] == 2
    folded = load_notifications(settings, topics)
    assert all(s.takeovers == 0 and s.owner in ("notifier-a", "notifier-b") for s in folded.states.values())
    assert sum(r.kind == DELIVERED for r in log_records(settings, topics)) == 4


def test_an_unreachable_receiver_shows_failing_with_its_reason_and_a_bad_url_gives_up(
    settings: KafkaSettings, topics: Topics, closed_port: int
) -> None:
    refused = a_job("refused", f"http://127.0.0.1:{closed_port}/hook", total=0, error="input missing")
    unknown = a_job("unknown", "http://nearline-test.invalid/hook", total=0, error="input missing")
    not_http = a_job("not-http", "ftp://files.example/hook", total=0, error="input missing")
    for job in (refused, unknown, not_http):
        register(settings, topics, job)

    def attempts(job_id: str) -> int:
        shown = notification_of(settings, topics, job_id)
        return 0 if shown is None else int(shown["attempts"])

    with running(settings, topics, "notifier-a"):
        wait_until(lambda: attempts("refused") >= 2 and attempts("unknown") >= 1, 60, "retried attempts")
        wait_until(lambda: (notification_of(settings, topics, "not-http") or {})["state"] == "gave_up", 30, "gave up")
        shown = notification_of(settings, topics, "refused")
    assert shown is not None
    assert (shown["state"], shown["last_error"], shown["delivered_at"]) == (
        "failing",
        f"no HTTP answer from 127.0.0.1:{closed_port} within 5 s",
        None,
    )
    unreached = notification_of(settings, topics, "unknown")
    assert unreached is not None and unreached["state"] == "failing"
    assert unreached["last_error"].startswith("cannot resolve host nearline-test.invalid: ")
    gave_up = notification_of(settings, topics, "not-http")
    assert gave_up is not None and (gave_up["attempts"], gave_up["last_error"]) == (
        1,
        "'ftp://files.example/hook': a webhook URL must start with http:// or https://",
    )
    assert notification_of(settings, topics, "no-such-job") is None
    # and `nearline status` says so, in words and in its JSON document
    env = {
        **os.environ,
        "NEARLINE_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "NEARLINE_NAMESPACE": topics.namespace,
    }
    status = [sys.executable, "-m", "jobs.cli", "status", "refused"]
    said = subprocess.run(status, env=env, capture_output=True, text=True, timeout=60)
    assert said.returncode == 0, said.stderr
    assert f"webhook: http://127.0.0.1:{closed_port}/hook: failing, retried after " in said.stdout
    assert f"no HTTP answer from 127.0.0.1:{closed_port} within 5 s" in said.stdout
    document = subprocess.run([*status, "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert json.loads(document.stdout)["notification"]["state"] == "failing"


def test_a_notifier_started_after_the_delivery_posts_nothing_again(
    settings: KafkaSettings, topics: Topics, receiver: Receiver
) -> None:
    job = a_job("done", receiver.url("/done"), total=0, error="input missing")
    register(settings, topics, job)
    with Notifier(settings, topics, quick("notifier-a")) as first:
        step_until(first, lambda: bool((s := first.log.get(key_of(job))) and s.final), 60, "sent")
    for name in ("notifier-b", "notifier-a"):  # another, and the same one restarted
        with Notifier(settings, topics, quick(name)) as again:
            step_until(again, lambda: again.ready, 30, "read to the end")
            for _ in range(3):
                again.step()
    assert [p.status for p in receiver.to("/done")] == [200]
    assert [r.kind for r in log_records(settings, topics)].count(CLAIM) == 1


def test_a_claim_whose_owner_went_silent_is_taken_over_after_its_lease(
    settings: KafkaSettings, topics: Topics, receiver: Receiver
) -> None:
    job = a_job("orphan", receiver.url("/orphan"), total=0, error="input missing")
    register(settings, topics, job)
    ghost = Notification(job.job_id, job.submission or 0, CLAIM, "ghost", "g1", now_us(), receiver.url("/orphan"), 500)
    ensure_topics(settings, [notifications_topic(topics)])
    produce_all(make_producer(settings), [OutRecord(topics.notifications, encode(ghost), kafka_key(ghost).encode())])
    with running(settings, topics, "notifier-b"):
        wait_until(lambda: delivered(settings, topics, "orphan"), 60, "delivered by the notifier that took over")
    state = load_notifications(settings, topics).get(key_of(job))
    assert state is not None and (state.owner, state.takeovers) == ("notifier-b", 1)
    claims = [r for r in log_records(settings, topics) if r.kind == CLAIM]
    assert [c.worker for c in claims] == ["ghost", "notifier-b"]
    assert claims[1].at - ghost.at > 500_000  # not claimed while the ghost's lease ran
    assert [p.status for p in receiver.to("/orphan")] == [200]


@pytest.mark.process
@pytest.mark.timeout(300)
def test_a_running_notifier_rides_out_a_broker_restart_that_lost_everything(receiver: Receiver, tmp_path: Path) -> None:
    broker = EmbeddedBroker.start(tmp_path / "broker.log")
    settings, topics = KafkaSettings(broker.bootstrap_servers), Topics("lone")
    events: list[str] = []
    stop = threading.Event()
    try:
        with Notifier(settings, topics, quick("notifier-a"), on_event=events.append) as notifier:
            runner = threading.Thread(target=notifier.run, args=(stop, 1.0), daemon=True)
            runner.start()
            register(settings, topics, a_job("before", receiver.url("/before"), total=0, error="input missing"))
            wait_until(lambda: len(receiver.to("/before")) == 1, 60, "the POST before the restart")
            broker.stop()
            broker = EmbeddedBroker.start(tmp_path / "broker2.log", port=broker.port)  # empty
            wait_until(lambda: any("Kafka unavailable" in e for e in events), 120, f"the outage noticed: {events}")
            register(settings, topics, a_job("after", receiver.url("/after"), total=0, error="input missing"))
            wait_until(lambda: len(receiver.to("/after")) == 1, 120, f"the POST after the restart: {events}")
            stop.set()
            runner.join(30)
            assert not runner.is_alive()
        assert any(e.startswith("notifier: Kafka answers again after") for e in events), events
        assert [p.status for p in receiver.posts] == [200, 200]
    finally:
        stop.set()
        broker.stop()


@pytest.mark.process
def test_the_worker_names_a_broker_that_is_down_with_exit_code_3() -> None:
    env = {**os.environ, "NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "worker", "notifier"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3, done.stderr
    assert "Kafka at 127.0.0.1:1 cannot be reached: 127.0.0.1:1 refused the connection" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_notifiers_metrics_count_its_posts_by_outcome_and_what_it_gave_up(
    settings: KafkaSettings, topics: Topics, receiver: Receiver
) -> None:
    receiver.answers["/counted"] = [503]
    register(settings, topics, a_job("counted", receiver.url("/counted"), total=0, error="input missing"))
    register(settings, topics, a_job("never", "ftp://files.example/hook", total=0, error="input missing"))

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = (
        sample("nearline_notifier_attempts_total", outcome="delivered"),
        sample("nearline_notifier_attempts_total", outcome="failed"),
        sample("nearline_notifier_gave_up_total"),
    )
    with Notifier(settings, topics, quick("metered"), metrics=PrometheusNotifierMetrics()) as notifier:
        step_until(notifier, lambda: delivered(settings, topics, "counted"), 30, "the delivery")
        step_until(notifier, lambda: sample("nearline_notifier_gave_up_total") > before[2], 30, "giving up")
    after = (
        sample("nearline_notifier_attempts_total", outcome="delivered"),
        sample("nearline_notifier_attempts_total", outcome="failed"),
        sample("nearline_notifier_gave_up_total"),
    )
    # /counted: refused once, then delivered; the ftp:// URL: one failed attempt, given up at once
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 2, 1]
