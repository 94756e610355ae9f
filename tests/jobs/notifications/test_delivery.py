"""One webhook POST against a loopback receiver: what it sends, and the reason each failure gets."""

from __future__ import annotations

import json

from jobs.notifications.delivery import post, user_agent
from tests.support.webhook_receiver import Receiver

BODY = json.dumps({"job_id": "j1", "state": "completed"}).encode()


def test_a_2xx_answer_delivers_the_body_with_its_headers(receiver: Receiver) -> None:
    receiver.answers["/hook"] = [202]
    answer = post(receiver.url("/hook"), BODY, "j1/42", timeout_s=5)
    assert (answer.delivered, answer.http_status, answer.error) == (True, 202, None)
    [got] = receiver.to("/hook")
    assert json.loads(got.body) == {"job_id": "j1", "state": "completed"}
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["Idempotency-Key"] == "j1/42"
    assert got.headers["User-Agent"] == user_agent() and user_agent().startswith("nearline/")


def test_a_refusing_receiver_is_a_failed_attempt_with_its_status_and_answer(receiver: Receiver) -> None:
    receiver.answers["/hook"] = [503]
    answer = post(receiver.url("/hook"), BODY, "j1/42", timeout_s=5)
    assert (answer.delivered, answer.http_status, answer.permanent) == (False, 503, False)
    assert answer.error == "HTTP 503 Service Unavailable: busy, try later"


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.answers["/moved"] = [302]
    answer = post(receiver.url("/moved"), BODY, "j1/42", timeout_s=5)
    assert (answer.delivered, answer.http_status) == (False, 302)
    assert answer.error == ("HTTP 302 Found: redirected to http://127.0.0.1:1/elsewhere, which a webhook never follows")
    assert len(receiver.posts) == 1


def test_a_closed_port_an_unknown_host_and_a_receiver_that_never_answers_each_say_why(
    receiver: Receiver, closed_port: int
) -> None:
    refused = post(f"http://127.0.0.1:{closed_port}/hook", BODY, "k", timeout_s=5)
    assert (refused.delivered, refused.error) == (False, f"connection refused by 127.0.0.1:{closed_port}")
    unknown = post("http://nearline-test.invalid/hook", BODY, "k", timeout_s=5)
    assert unknown.error is not None and unknown.error.startswith("cannot resolve host nearline-test.invalid: ")
    receiver.hold.add("/slow")
    slow = post(receiver.url("/slow"), BODY, "k", timeout_s=0.3)
    assert (slow.delivered, slow.error) == (False, f"no answer from 127.0.0.1:{receiver.port} within 0.3 s")


def test_a_url_that_is_not_http_is_given_up_at_once_without_a_connection() -> None:
    answer = post("ftp://files.example/x", BODY, "k", timeout_s=5)
    assert (answer.delivered, answer.permanent) == (False, True)
    assert answer.error == "'ftp://files.example/x': a webhook URL must start with http:// or https://"


def test_the_worker_refuses_a_first_retry_later_than_the_longest_before_it_connects() -> None:
    from click.testing import CliRunner

    from jobs.cli.main import cli

    out = CliRunner().invoke(
        cli,
        ["worker", "notifier", "--first-retry-s", "5", "--max-retry-s", "1"],
        env={"NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
    )
    assert out.exit_code == 2, out.output
    assert "the first retry (5 s) must be after 0 s and no later than the longest (1 s)" in out.output
