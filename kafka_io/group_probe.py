"""Consumer-group questions asked from a child process, which may die where this one must not.

librdkafka (2.16.0, in confluent-kafka 2.16.1 and 2.16.2) aborts the whole process when a
coordinator-targeted admin request (DescribeConsumerGroups, ListConsumerGroupOffsets) timed out
while its coordinator was silent, the connection was dropped, and the coordinator answers again:
`rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0 failed` (a use-after-free on
that error path; the fix, confluentinc/librdkafka#5397, is not released). A frozen broker does
exactly that, and the processes that ask (submit --wait's watchdog, every 2 s for hours) must
ride outages out. So the asking happens here, in a child: a child that dies or goes silent leaves
its question unanswered (None, which callers read as "the cluster did not answer"), and one whose
question the cluster left unanswered is replaced before the next, so that no child holds a
timed-out request when the broker comes back. Requests that are not coordinator-targeted
(metadata, list_consumer_groups, a consumer's committed()) stay in the caller's process.

The protocol is JSON lines on the child's stdin and stdout: the settings first, then one question
and one answer at a time. The child exits when its stdin closes, so it never outlives its parent's
interest."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import AdminClient

from kafka_io import errors
from kafka_io.clients import as_refusal, make_admin
from kafka_io.settings import KafkaSettings

log = logging.getLogger(__name__)

# How long a child may take to start (an interpreter and confluent_kafka) before its first answer
# counts as missing, on a machine loaded by the workers it watches.
_START_S = 15.0
# past a request's timeout, by which librdkafka fails the request itself
RESOLVE_MARGIN_S = 5.0
# Past the child's own timeouts, by which it answers even when the cluster does not.
_ANSWER_MARGIN_S = 5.0
# How long a child whose stdout closed may take to exit on its own, so its exit code says why.
_EXIT_S = 2.0

_REFUSALS = {
    cls.__name__: cls
    for cls in (
        errors.KafkaRefusedError,
        errors.KafkaAuthorizationError,
        errors.KafkaAuthenticationError,
        errors.KafkaTlsError,
    )
}
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


class GroupProbe:
    """One child process answering group questions (kafka_io.groups), started at the first
    question. A child that left a question unanswered is replaced before the next: where the
    cluster was down, a fresh client asks; where the client itself was stuck, or had sent the
    requests on which librdkafka aborts once the broker is back, it is gone before that. Safe to
    share between threads: one question at a time."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._child: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None  # the child's, read when it dies: librdkafka's last word
        self._started = 0.0
        self._unread = b""
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The child answering now, if one runs."""
        return self._child.pid if self._child is not None and self._child.poll() is None else None

    def ask(self, question: dict[str, Any], work_s: float) -> dict[str, Any] | None:
        """The child's answer to `question`, which takes it at most `work_s`: a dict whose
        "answered" says whether the cluster answered; None where the child died or went silent
        meanwhile. A refusal it was told (an ACL, a login) is raised here."""
        with self._lock:
            child, asked = self._running(), time.monotonic()
            deadline = max(asked, self._started + _START_S) + work_s + _ANSWER_MARGIN_S
            line = self._exchange(child, json.dumps(question).encode(), deadline)
            if line is None:
                self._lose(child, f"it did not answer in {time.monotonic() - asked:.0f} s")
                return None
            answer: dict[str, Any] = json.loads(line)
            if not answer.get("answered", True):
                self._retire()
        if "refused" in answer:
            kind, message = answer["refused"]
            raise _REFUSALS.get(kind, errors.KafkaRefusedError)(message)
        return answer

    def close(self) -> None:
        with self._lock:
            self._retire()

    def __enter__(self) -> GroupProbe:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _running(self) -> subprocess.Popen[bytes]:
        if self._child is not None and self._child.poll() is not None:
            self._lose(self._child, "it was found dead")
        if self._child is None:
            path = os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - the child's for its life; closed in _retire
            self._child = subprocess.Popen(
                [sys.executable, "-c", "from kafka_io.group_probe import serve; serve()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env={**os.environ, "PYTHONPATH": path},
            )
            self._started, self._unread = time.monotonic(), b""
            _write(self._child.stdin, json.dumps(asdict(self._settings)).encode())
        return self._child

    def _exchange(self, child: subprocess.Popen[bytes], question: bytes, deadline: float) -> bytes | None:
        if not _write(child.stdin, question):
            return None
        assert child.stdout is not None
        fd = child.stdout.fileno()
        while b"\n" not in self._unread:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # it is dying: its exit code says how
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(_EXIT_S)
                return None
            self._unread += chunk
        line, _, self._unread = self._unread.partition(b"\n")
        return line

    def _lose(self, child: subprocess.Popen[bytes], why: str) -> None:
        """Says why a child is gone (its last line where it died of a signal) and drops it."""
        code = child.poll()
        if code is not None and code < 0:
            why = f"it was killed by {signal.Signals(-code).name}"
        elif code:
            why = f"it exited with code {code}"
        if code and (said := self._last_said()):
            why += f"; its last line: {said}"
        self._retire()
        log.warning(
            "the child process asking Kafka about consumer groups is gone (%s): its question counts as "
            "unanswered and the next one starts a new child",
            why,
        )

    def _retire(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            if child.poll() is None:
                child.kill()
            child.wait()
            for stream in (child.stdin, child.stdout):
                if stream is not None:
                    stream.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _last_said(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, self._stderr.tell() - 1000))
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""


def _write(stream: IO[bytes] | None, line: bytes) -> bool:
    try:
        assert stream is not None
        stream.write(line + b"\n")
        stream.flush()
    except (BrokenPipeError, OSError, ValueError):
        return False
    return True


def serve() -> None:
    """The child: answers questions until its stdin closes."""
    # A Ctrl-C in a terminal reaches the whole process group: the parent decides when this ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The client's own log lines say nothing to the parent that an unanswered question does not,
    # and would grow the stderr file kept for the one line that matters (an abort's, written by C).
    logging.disable(logging.CRITICAL)
    settings = KafkaSettings(**json.loads(sys.stdin.buffer.readline()))
    admin = make_admin(settings)  # one for the child's life: a collected client never resolves its futures
    for line in sys.stdin.buffer:
        try:
            reply = answer(admin, json.loads(line))
        except errors.KafkaRefusedError as refused:
            reply = {"refused": [type(refused).__name__, str(refused)]}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def answer(admin: AdminClient, question: dict[str, Any]) -> dict[str, Any]:
    """A question's answer, in JSON's types: the child's side."""
    timeout_s = float(question["timeout_s"])
    if "states" in question:
        states = _states(admin, question["states"], timeout_s)
        return {"states": states, "answered": bool(states)}
    total = _committed(admin, question["committed"], timeout_s)
    return {"total": total, "answered": total is not None}


def _states(admin: AdminClient, groups: list[str], timeout_s: float) -> dict[str, str]:
    """Each answered group's state by name; a group the cluster did not answer for is left out."""
    states = {}
    for group, future in admin.describe_consumer_groups(groups, request_timeout=timeout_s).items():
        try:
            states[group] = future.result(timeout=timeout_s + RESOLVE_MARGIN_S).state.name
        except KafkaException as exc:
            if (refused := as_refusal(exc, "Describe", group)) is not None:
                raise refused from None  # not "no members": the principal may not see the group
        except TimeoutError:
            pass
    return states


def _committed(admin: AdminClient, group: str, timeout_s: float) -> int | None:
    try:
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s)
        listing = futures[group].result(timeout=timeout_s + RESOLVE_MARGIN_S)
    except (KafkaException, TimeoutError):
        return None
    return sum(max(tp.offset, 0) for tp in listing.topic_partitions or [])
