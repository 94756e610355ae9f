"""Signed webhooks, checked as a receiver checks them: with the `standardwebhooks` package (the
Standard Webhooks reference library), against real POSTs to a loopback receiver."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from jobs.cli.main import cli
from jobs.notifications.delivery import DeliverySettings, post
from jobs.notifications.signing import SecretError, SigningKeys
from jobs.notifications.targets import TargetSettings
from tests.support.webhook_receiver import Post, Receiver

OLD = "whsec_" + base64.b64encode(b"the old key of 32 bytes, exactly").decode()
NEW = "whsec_" + base64.b64encode(bytes(range(24))).decode()
BODY = json.dumps({"job_id": "j1", "state": "completed"}).encode()


def signed_post(receiver: Receiver, secrets: list[str], path: str = "/hook") -> Post:
    config = DeliverySettings(5, TargetSettings(allow_private=True), SigningKeys.parse(secrets))
    assert post(receiver.url(path), BODY, "j1/42", config).delivered
    return receiver.to(path)[-1]


def test_a_receiver_verifies_a_signed_delivery_and_rejects_a_tampered_body(receiver: Receiver) -> None:
    got = signed_post(receiver, [NEW])
    assert got.headers["webhook-id"] == got.headers["Idempotency-Key"] == "j1/42"
    assert got.headers["webhook-signature"].startswith("v1,") and " " not in got.headers["webhook-signature"]
    assert Webhook(NEW).verify(got.body, got.headers) == {"job_id": "j1", "state": "completed"}
    tampered = got.body.replace(b"completed", b"failed")
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(NEW).verify(tampered, got.headers)
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(OLD).verify(got.body, got.headers)  # another key
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(NEW).verify(got.body, {**got.headers, "webhook-id": "j1/43"})  # replayed as another


def test_during_a_rotation_each_post_verifies_with_either_secret(receiver: Receiver) -> None:
    got = signed_post(receiver, [NEW, OLD])
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    for secret in (NEW, OLD):
        assert Webhook(secret).verify(got.body, got.headers)["job_id"] == "j1"
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + base64.b64encode(b"a third key, never configured").decode()).verify(got.body, got.headers)


def test_an_unpadded_secret_signs_as_the_library_reads_it(receiver: Receiver) -> None:
    unpadded = "whsec_" + base64.b64encode(bytes(range(20))).decode().rstrip("=")
    got = signed_post(receiver, [unpadded])
    assert Webhook(unpadded).verify(got.body, got.headers)


@pytest.mark.parametrize(
    ("secret", "says"),
    [
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "signing secret 1 does not start with 'whsec_'"),
        ("whsec_not*base64!", "signing secret 1: what follows 'whsec_' is not base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "signing secret 1 holds 5 byte(s): give at least 16"),
        ("whsec_", "signing secret 1 holds 0 byte(s)"),
    ],
)
def test_a_malformed_secret_is_refused_without_being_repeated(secret: str, says: str) -> None:
    with pytest.raises(SecretError) as raised:
        SigningKeys.parse([secret])
    assert str(raised.value).startswith(says)
    assert secret.removeprefix("whsec_") not in str(raised.value) or secret == "whsec_"


def test_keys_never_show_in_their_repr() -> None:
    keys = SigningKeys.parse([NEW, OLD])
    for shown in (repr(keys), str(keys), repr(DeliverySettings(signing=keys))):
        assert "2 key(s)" in shown
        assert NEW[6:] not in shown and OLD[6:] not in shown and "\\x00\\x01" not in shown


def test_the_worker_refuses_a_malformed_secret_at_start_and_never_prints_one() -> None:
    runner = CliRunner()
    base = {"NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    bad = "whsec_c2VjcmV0LXNob3J0"  # base64 of "secret-short": 12 bytes
    out = runner.invoke(cli, ["worker", "notifier", "--signing-secret", NEW, "--signing-secret", bad], env=base)
    assert out.exit_code == 2, out.output
    assert "Invalid value for '--signing-secret': signing secret 2 holds 12 byte(s)" in out.output
    assert "c2VjcmV0" not in out.output and NEW[6:] not in out.output
    by_env = runner.invoke(
        cli, ["worker", "notifier"], env={**base, "NEARLINE_WORKER_NOTIFIER_SIGNING_SECRET": f"{NEW} oops"}
    )
    assert by_env.exit_code == 2 and "signing secret 2 does not start with 'whsec_'" in by_env.output
    assert NEW[6:] not in by_env.output
    helped = runner.invoke(
        cli, ["worker", "notifier", "--help"], env={**base, "NEARLINE_WORKER_NOTIFIER_SIGNING_SECRET": NEW}
    )
    assert helped.exit_code == 0 and "NEARLINE_WORKER_NOTIFIER_SIGNING_SECRET" in helped.output
    assert NEW[6:] not in helped.output
    not_a_network = runner.invoke(cli, ["worker", "notifier", "--allow-target", "intranet"], env=base)
    assert not_a_network.exit_code == 2
    assert "Invalid value for '--allow-target': 'intranet' is not an address or a CIDR network" in not_a_network.output


def test_the_worker_reads_secrets_from_a_file_and_names_an_unreadable_one_without_its_bytes(tmp_path: Path) -> None:
    folder = tmp_path
    runner = CliRunner()
    env = {"NEARLINE_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    bad = folder / "bad"
    bad.write_bytes(b"whsec_\xff\xfe-secret-bytes\n")
    out = runner.invoke(cli, ["worker", "notifier", "--signing-secret-file", str(bad)], env=env)
    assert out.exit_code == 2, out.output
    assert f"Invalid value for '--signing-secret-file': cannot read {bad}: UnicodeDecodeError" in out.output
    assert "secret-bytes" not in out.output and "xff" not in out.output
    short = folder / "short"
    short.write_text(f"# rotated in on the 1st\n{NEW}\n\nwhsec_c2VjcmV0LXNob3J0\n")
    out = runner.invoke(cli, ["worker", "notifier", "--signing-secret-file", str(short)], env=env)
    assert out.exit_code == 2 and "signing secret 2 holds 12 byte(s)" in out.output
    # with secrets given otherwise too, a bad one in the file is said to be the file's, counted there
    both = ["worker", "notifier", "--signing-secret", NEW, "--signing-secret", NEW, "--signing-secret-file", str(short)]
    out = runner.invoke(cli, both, env=env)
    assert out.exit_code == 2, out.output
    assert f"Invalid value for '--signing-secret-file': {short}: signing secret 2 holds 12 byte(s)" in out.output
    assert "c2VjcmV0" not in out.output and NEW[6:] not in out.output
