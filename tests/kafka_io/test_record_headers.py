"""The headers every job record carries, read back by any worker or command: whatever bytes a
foreign producer put there, the readers answer (None or 1 for what they cannot read) and never
raise, since a reader that raised on a record would fail on it at every redelivery."""

from __future__ import annotations

import pytest

from kafka_io.records import job_of, job_record, records_of, submission_of

Headers = list[tuple[str, bytes | None]]


def test_what_job_record_writes_is_read_back() -> None:
    out = job_record("results", b"v", "job-é", "r1", 1_764_822_600_123_456)
    headers: Headers = list(out.headers)
    assert (job_of(headers), submission_of(headers), records_of(headers)) == ("job-é", 1_764_822_600_123_456, 1)
    assert records_of([*headers, ("records", b"128")]) == 128


@pytest.mark.parametrize("value", [b"\xff\xfe", b"job-\xc3", b"\xed\xa0\x80"])
def test_a_job_header_that_is_not_utf8_reads_as_none(value: bytes) -> None:
    assert job_of([("job_id", value)]) is None


@pytest.mark.parametrize(
    "value",
    [b"9" * 4301, b"1" * 20, b"", b"-1", b" 12", b"12a", b"\xd9\xa1", b"1.5", None],
    ids=["4301 digits", "20 digits", "empty", "negative", "space", "letters", "arabic digit", "decimal", "null"],
)
def test_malformed_numbers_read_as_absent(value: bytes | None) -> None:
    assert submission_of([("submission", value)]) is None
    assert records_of([("records", value)]) == 1


def test_numbers_up_to_19_digits_and_zero_counts() -> None:
    assert submission_of([("submission", b"9" * 19)]) == 10**19 - 1
    assert submission_of([("submission", b"007")]) == 7
    assert records_of([("records", b"0")]) == 1  # a pack holds at least one record
    assert job_of({"job_id": b"j"}) == "j" and submission_of({"submission": b"5"}) == 5  # faust's mapping
