"""The preprocess worker's log filter (preprocess_app/outage_log.py) on real log records; the worker's
log in a real outage is tests/trials/test_outages.py."""

from __future__ import annotations

import logging

from kafka_io.settings import KafkaSettings
from preprocess_app.outage_log import BrokerWait, OncePerCause


def record(name: str, msg: str, created: float, *args: object) -> logging.LogRecord:
    r = logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)
    r.created = created
    return r


def test_each_cause_passes_once_a_minute_with_a_count_of_those_held_back() -> None:
    quiet = OncePerCause(BrokerWait(KafkaSettings("127.0.0.1:1")))
    fetch = "Failed fetch messages from %s: %s"
    records = [record("aiokafka.consumer.fetcher", fetch, t, 1, "down") for t in range(0, 131, 2)]
    passed = [r.getMessage() for r in records if quiet.filter(r)]
    assert passed == [  # at 0, 60 and 120 s
        "Failed fetch messages from 1: down",
        "Failed fetch messages from 1: down (29 more like this since the last such line)",
        "Failed fetch messages from 1: down (29 more like this since the last such line)",
    ]
    later = record("aiokafka.consumer.fetcher", fetch, 300.0, 1, "down")  # after 122-130 s held back
    assert quiet.filter(later) and later.getMessage().endswith("(5 more like this since the last such line)")
    # another template, another logger and our own lines are other causes
    assert quiet.filter(record("aiokafka.consumer.fetcher", "Fetch offset %s is out of range", 2.0, 5))
    assert quiet.filter(record("aiokafka.client", fetch, 2.0, 1, "down"))
    assert all(quiet.filter(record("preprocess_app.app", fetch, t, 1, "down")) for t in range(3))


def test_an_unreachable_broker_is_named_once_per_outage() -> None:
    wait = BrokerWait(KafkaSettings("127.0.0.1:1"))
    quiet = OncePerCause(wait)
    assert not wait.waiting
    quiet.filter(record("aiokafka.client", "Unable connect to node with id %s: %s", 0.0, 1, "refused"))
    assert wait.waiting
    wait.check_back()  # nothing listens on port 1
    assert wait.waiting


def test_a_traceback_of_kafka_s_refusal_is_dropped_and_any_other_kept() -> None:
    """A refused ACL crashes faust's worker, whose crash (and asyncio's unretrieved task) logs a
    traceback before ours says what was refused in one line and exits 11: those tracebacks go,
    whatever logger writes them; every other exception keeps its traceback."""
    import sys

    from aiokafka.errors import KafkaConnectionError, TopicAuthorizationFailedError

    quiet = OncePerCause(BrokerWait(KafkaSettings("127.0.0.1:1")))

    def crash(exc: Exception, name: str) -> logging.LogRecord:
        try:
            raise exc
        except Exception:
            return logging.LogRecord(name, logging.ERROR, __file__, 1, "Crashed reason=%r", (exc,), sys.exc_info())

    for name in ("faust.worker", "mode.services", "asyncio"):
        refused = crash(TopicAuthorizationFailedError("ns.raw.text"), name)
        assert quiet.filter(refused) and refused.exc_info is None
        assert "Traceback" not in logging.Formatter().format(refused)
    other = crash(KafkaConnectionError("no broker"), "faust.worker")
    assert quiet.filter(other) and other.exc_info is not None
    assert "Traceback" in logging.Formatter().format(other)
