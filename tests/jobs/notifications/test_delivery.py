"""One webhook POST against a loopback receiver: what it sends, the reason each failure gets, what a
receiver's answer may show, and the addresses a POST may reach."""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from typing import Any

import pytest

from jobs.notifications.delivery import DeliverySettings, post, redacted, refusal, user_agent
from jobs.notifications.exchange import Reply
from jobs.notifications.targets import Address, TargetSettings
from tests.support.webhook_receiver import Dribbler, Receiver
from tests.support.webhook_receiver import dribbler as dribbler

BODY = json.dumps({"job_id": "j1", "state": "completed"}).encode()
LOOPBACK = DeliverySettings(5, TargetSettings(allow_private=True))  # the tests' receivers are on loopback


def test_a_2xx_answer_delivers_the_body_with_its_headers(receiver: Receiver) -> None:
    receiver.answers["/hook?token=t"] = [202]
    answer = post(receiver.url("/hook?token=t"), BODY, "j1/42", LOOPBACK)
    assert (answer.delivered, answer.http_status, answer.error) == (True, 202, None)
    [got] = receiver.to("/hook?token=t")
    assert json.loads(got.body) == {"job_id": "j1", "state": "completed"}
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["Idempotency-Key"] == got.headers["webhook-id"] == "j1/42"
    assert abs(int(got.headers["webhook-timestamp"]) - time.time()) < 60
    assert "webhook-signature" not in got.headers  # no secret configured: unsigned
    assert got.headers["User-Agent"] == user_agent() and user_agent().startswith("nearline/")
    assert got.headers["Host"] == f"127.0.0.1:{receiver.port}"


def test_userinfo_in_the_url_becomes_basic_credentials_and_is_never_logged(receiver: Receiver) -> None:
    url = f"http://hook%40user:s3cr%3At@127.0.0.1:{receiver.port}/hook?token=abc#frag"
    assert post(url, BODY, "k", LOOPBACK).delivered
    [got] = receiver.to("/hook?token=abc")
    assert got.headers["Authorization"] == "Basic aG9va0B1c2VyOnMzY3I6dA=="  # hook@user:s3cr:t
    assert redacted(url) == f"http://127.0.0.1:{receiver.port}/hook"
    assert redacted("http://[::1]:8080/a?b=c") == "http://[::1]:8080/a"


def test_an_allowed_receivers_refusal_shows_its_status_and_answer(receiver: Receiver) -> None:
    receiver.answers["/hook"] = [503]
    answer = post(receiver.url("/hook"), BODY, "j1/42", LOOPBACK)
    assert (answer.delivered, answer.http_status, answer.permanent) == (False, 503, False)
    assert answer.error == "HTTP 503 Service Unavailable: busy, try later"
    by_network = DeliverySettings(5, TargetSettings.of(False, ["127.0.0.0/8"]))
    receiver.answers["/hook"] = [503]
    assert post(receiver.url("/hook"), BODY, "j1/42", by_network).error == answer.error


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.answers["/moved"] = [302]
    answer = post(receiver.url("/moved"), BODY, "j1/42", LOOPBACK)
    assert (answer.delivered, answer.http_status) == (False, 302)
    assert answer.error == ("HTTP 302 Found: redirected to http://127.0.0.1:1/elsewhere, which a webhook never follows")
    assert len(receiver.posts) == 1


def test_a_public_receivers_answer_shows_its_status_only() -> None:
    """What a receiver says (its reason phrase, its text, where it redirects) is shown for the
    operator's own receivers only: an internal service's answer can hold what it guards."""
    public = ipaddress.ip_address("93.184.215.14")
    leaky = Reply(405, "Nope token=abc", None, b"db=postgres://admin:pw@10.0.0.9/prod", public)
    assert refusal(leaky, own_receiver=False) == "HTTP 405 Method Not Allowed"
    moved = Reply(307, "Temporary Redirect", "http://10.0.0.9/admin?key=k", b"", public)
    assert (
        refusal(moved, own_receiver=False) == "HTTP 307 Temporary Redirect: a redirect, which a webhook never follows"
    )
    assert refusal(Reply(599, "Odd", None, b"x", public), own_receiver=False) == "HTTP 599"
    assert "db=postgres" in refusal(leaky, own_receiver=True)


def test_control_characters_in_a_receivers_answer_are_escaped() -> None:
    loopback = ipaddress.ip_address("127.0.0.1")
    hostile = Reply(500, "Oops\x1b]0;x\x07", "http://a/\x1b[2J", b"\x1b]0;pwned\x07 bad\r\nthing\x00", loopback)
    error = refusal(hostile, own_receiver=True)
    assert error == "HTTP 500 Oops\\x1b]0;x\\x07: \\x1b]0;pwned\\x07 bad thing\\x00"
    assert error.isprintable()
    redirect = refusal(Reply(301, "Moved", "http://a/\x1b[2J", b"", loopback), own_receiver=True)
    assert redirect == "HTTP 301 Moved: redirected to http://a/\\x1b[2J, which a webhook never follows"


def test_refused_and_silent_receivers_get_one_message_and_the_log_tells_them_apart(
    receiver: Receiver, closed_port: int
) -> None:
    """Toward the submitter, a closed port and a port that takes the connection and never answers
    read alike (reasons must not map which ports are open); the notifier's log says which."""
    quick = DeliverySettings(0.5, TargetSettings(allow_private=True))
    refused = post(f"http://127.0.0.1:{closed_port}/hook", BODY, "k", quick)
    assert (refused.delivered, refused.error) == (False, f"no HTTP answer from 127.0.0.1:{closed_port} within 0.5 s")
    assert refused.detail == "connection refused"
    receiver.hold.add("/slow")
    slow = post(receiver.url("/slow"), BODY, "k", quick)
    assert (slow.delivered, slow.error) == (False, f"no HTTP answer from 127.0.0.1:{receiver.port} within 0.5 s")
    assert slow.detail == "no complete answer before the deadline"
    unknown = post("http://nearline-test.invalid/hook", BODY, "k", LOOPBACK)
    assert unknown.error is not None and unknown.error.startswith("cannot resolve host nearline-test.invalid: ")
    assert not unknown.permanent


class PublicLoopback(TargetSettings):
    """Loopback reached as a public address is: permitted, not allowed by name."""

    def refusal(self, address: Address) -> str | None:
        return None

    def explicitly_allowed(self, address: Address) -> bool:
        return False


def test_a_refused_port_of_a_target_not_allowed_by_name_fails_at_the_deadline_as_a_silent_one_does(
    closed_port: int,
) -> None:
    """The time of an attempt, which `status` shows, must not tell a refused port from a silent
    one either: for a target the operator did not allow by name, a refusal is waited out."""
    started = time.monotonic()
    answer = post(f"http://127.0.0.1:{closed_port}/hook", BODY, "k", DeliverySettings(1.0, PublicLoopback()))
    assert time.monotonic() - started >= 0.99  # a lower bound: a refusal alone takes milliseconds
    assert (answer.error, answer.detail) == (
        f"no HTTP answer from 127.0.0.1:{closed_port} within 1 s",
        "connection refused",
    )


def test_an_answer_dribbled_a_line_at_a_time_is_cut_at_the_timeout(dribbler: Dribbler) -> None:
    """`200 OK` and a header line every 0.2 s: each read gets something, so a per-read timeout
    never fires; the exchange's deadline does."""
    dribbler.every_s = 0.2
    started = time.monotonic()
    answer = post(dribbler.url("/hook"), BODY, "k", DeliverySettings(1.0, TargetSettings(allow_private=True)))
    took = time.monotonic() - started
    assert (answer.delivered, answer.error) == (False, f"no HTTP answer from 127.0.0.1:{dribbler.port} within 1 s")
    assert took < 20, f"the POST lasted {took:.1f} s"  # generous: unbounded, it lasts as long as the dribbling


def test_a_private_target_is_refused_by_default_without_a_connection(receiver: Receiver) -> None:
    for url, shown in [
        (receiver.url("/hook"), "127.0.0.1 resolves to a loopback address (127.0.0.1)"),
        (f"http://localhost:{receiver.port}/hook", "localhost resolves to a loopback address"),
        (f"http://2130706433:{receiver.port}/hook", "2130706433 resolves to a loopback address (127.0.0.1)"),
    ]:
        answer = post(url, BODY, "k", DeliverySettings(5))
        assert (answer.delivered, answer.permanent) == (False, True), url
        assert answer.error is not None and answer.error.startswith(shown), answer.error
        assert answer.error.endswith(
            ", which a webhook may not reach; the notifier's operator can allow it with --allow-private-targets "
            "or --allow-target CIDR"
        )
    other_network = DeliverySettings(5, TargetSettings.of(False, ["10.0.0.0/8", "fd00::/8"]))
    assert post(receiver.url("/hook"), BODY, "k", other_network).permanent
    assert receiver.posts == []
    assert post(
        receiver.url("/hook"), BODY, "k", DeliverySettings(5, TargetSettings.of(False, ["127.0.0.1"]))
    ).delivered


def test_the_post_connects_to_the_address_it_checked(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resolver whose next answer differs (DNS rebinding) gains nothing: the host is resolved
    once, and the connection goes to the address that was judged."""
    answers = iter(["127.0.0.1", "10.255.255.1"])
    calls: list[str] = []
    real = socket.getaddrinfo

    def rebinding(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        if host != "rebind.test":
            return real(host, port, *args, **kwargs)
        calls.append(host)
        return real(next(answers), port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    only_loopback = DeliverySettings(5, TargetSettings.of(False, ["127.0.0.1/32"]))
    answer = post(f"http://rebind.test:{receiver.port}/hook", BODY, "k", only_loopback)
    assert answer.delivered, answer
    assert calls == ["rebind.test"]
    assert receiver.to("/hook")[0].headers["Host"] == f"rebind.test:{receiver.port}"


def test_a_url_that_is_not_http_is_given_up_at_once_without_a_connection() -> None:
    answer = post("ftp://files.example/x", BODY, "k", LOOPBACK)
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
