"""Text that came from anyone (a record id, a dead letter's error, a job's error) reaches the
terminal escaped: a carriage return or an escape sequence in it cannot rewrite the line or set
the terminal's title."""

from __future__ import annotations

from dataclasses import replace

from jobs.printable import shown
from jobs.registry import JobStatus
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.records import OutRecord
from kafka_io.topics import TopicSpec, ensure_topics
from schemas import DeadLetter, Job, encode
from tests.support.pipeline import RunningPipeline

HOSTILE = "ok\r\x1b]0;pwned\x07\x9b2J"


def test_shown_escapes_controls_and_keeps_printable_text() -> None:
    assert shown("plain text, ünïcode") == "plain text, ünïcode"
    assert shown(HOSTILE) == "ok\\r\\x1b]0;pwned\\x07\\x9b2J"


def test_a_failed_job_s_status_line_shows_its_error_escaped() -> None:
    job = replace(Job("job-e", "tiny", "in.jsonl", "text", 3, 1), error=f"cannot read {HOSTILE}")
    line = JobStatus(job).line()
    assert line == "job-e failed: cannot read ok\\r\\x1b]0;pwned\\x07\\x9b2J"
    assert line.isprintable()


def test_dlq_list_shows_ids_and_errors_escaped(pipeline: RunningPipeline) -> None:
    topics = pipeline.topics
    ensure_topics(pipeline.settings, [TopicSpec(topics.dead_letters)])
    letter = DeadLetter(
        "preprocess", "ValueError", f"bad {HOSTILE}", topics.raw_text, 0, 7, b"", 1, "job-x", f"r{HOSTILE}"
    )
    key = f"job-x/r{HOSTILE}".encode()
    produce_all(make_producer(pipeline.settings), [OutRecord(topics.dead_letters, encode(letter), key)])
    listed = pipeline.cli("dlq", "list", "--job", "job-x")
    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    assert all(c.isprintable() or c == "\t" for c in line)  # tabs part the columns; nothing else unprintable
    assert "rok\\r\\x1b]0;pwned\\x07\\x9b2J" in line and "bad ok\\r\\x1b" in line
