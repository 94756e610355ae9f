"""A job's results and dead letters, one per record id, between reading the topics and writing
them out: held in memory as their encoded values while they fit (MEMORY_BYTES), else in a
temporary sqlite file, one row per record id, read back in input order through an index, so
memory stays bounded for jobs larger than RAM. Results are kept as the bytes they came as and
written out from them in chunks (results/rows.py), never decoded into dicts one by one.

The rules are JobOutcome's (the first copy wins, the newest model version wins unless one is asked
for, a result replaces a dead letter, only the given submission counts); what differs is where
the records wait between reading the topics and writing them out.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from types import TracebackType

from kafka_io.reading import read_topics
from kafka_io.records import REUSED_HEADER, ConsumedRecord, header_of, submission_of
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics
from results.kept_columns import KeptColumns
from results.outcome import dead_seq, dead_submission, wins_over
from results.rows import OutputRow, writable_result
from schemas import DeadLetter, InferenceResult, Job, SerdeError, decode
from schemas.inference_result_bulk import read_result_bodies
from schemas.inference_result_bytes import ResultBody, read_result_body
from schemas.serde import decode_fields

_COMMIT_EVERY = 10_000  # rows per transaction: fewer fsync-free commits, bounded journal
_READ_AT_ONCE = 1024  # records whose results' bodies are read together (numpy's calls amortised)


# Results held in memory before the spill moves them to sqlite: a 30,000-result MiniLM job is
# ~50 MiB and never touches the disk (sqlite's statement was ~26-30 us of a result's ~65), while a
# job larger than this still waits on disk, not in RAM.
MEMORY_BYTES = 256 * 2**20
ENV_MEMORY_BYTES = "NEARLINE_RESULTS_MEMORY_BYTES"  # another limit for `results` (0: always spill)
_ROW_OVERHEAD = 600  # bytes of Python objects a row held in memory costs beyond its value

# record id -> (seq, dead, model version, encoded value, the result's body read at add, else None)
_Row = tuple[float, int, str | None, bytes, ResultBody | None]


class ResultSpill:
    """Results and dead letters of one job, held in memory as they are read and spilled to a
    temporary sqlite file once they outgrow memory_bytes."""

    def __init__(
        self,
        job_id: str,
        model_version: str | None = None,
        submission: int | None = None,
        directory: Path | None = None,
        kept: KeptColumns | None = None,
        memory_bytes: int = MEMORY_BYTES,
    ) -> None:
        self.job_id, self.model_version, self.submission = job_id, model_version, submission
        self.kept = kept  # the input columns the job keeps, for its outputs
        self.results = self.dead = self.duplicates = 0
        self.reused = 0  # results kept that were written from the results cache (docs/reuse.md)
        self.parent = Path(directory or tempfile.gettempdir())
        self.memory_bytes = memory_bytes
        self._rows: dict[str, _Row] = {}
        self._held = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._db: sqlite3.Connection | None = None
        self._pending = 0
        self._job_bytes = job_id.encode()
        self._job_prefix = self._job_bytes + b"/"
        self._batches: dict[str, int] = {}
        self._tokens: dict[str, int] = {}  # record id -> its generation's tokens (decoded results only)

    def _spill(self) -> sqlite3.Connection:
        """Move the rows held in memory to a new sqlite file, in one executemany."""
        self._dir = tempfile.TemporaryDirectory(prefix="nearline-results-", dir=self.parent)
        db = sqlite3.connect(Path(self._dir.name) / "spill.sqlite")
        # a scratch file: nothing to recover after a crash, so no journal and no fsync. A rowid
        # table, not WITHOUT ROWID: a row holds a whole encoded result (1.5 KiB for a 384-float
        # embedding), and a WITHOUT ROWID b-tree of rows that large is slower to insert into
        # (sqlite.org/withoutrowid.html): 46 -> 26 us a result in ResultSpill.add.
        db.executescript(
            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-16000;"
            "CREATE TABLE records (record_id TEXT PRIMARY KEY, seq REAL NOT NULL, dead INTEGER NOT NULL,"
            " version TEXT, value BLOB NOT NULL);"
        )
        db.executemany(
            "INSERT INTO records VALUES (?, ?, ?, ?, ?)",
            ((rid, seq, dead, version, value) for rid, (seq, dead, version, value, _) in self._rows.items()),
        )
        db.commit()
        self._rows.clear()
        self._held = 0
        self._db = db
        return db

    @property
    def done(self) -> int:
        return self.results + self.dead

    @property
    def failed(self) -> int:
        return self.dead

    def batch_sizes(self) -> dict[str, int]:
        return dict(self._batches)

    def reused_count(self) -> int:
        return self.reused

    def completion_tokens(self) -> int:
        return sum(self._tokens.values())

    def add(self, messages: Iterable[ConsumedRecord], topics: Topics) -> None:
        messages = iter(messages)
        while chunk := list(islice(messages, _READ_AT_ONCE)):
            self._add_chunk(chunk, topics)

    def _add_chunk(self, messages: list[ConsumedRecord], topics: Topics) -> None:
        results, dead_letters = topics.results, topics.dead_letters
        asked = self.submission
        # (record, its submission header, whether its body is read from its bytes): unless a
        # submission is asked for and the result has no header to tell it (then its decoded
        # fields decide). The bodies are read at once (schemas/inference_result_bulk.py); the
        # ones that leaves (None), one by one.
        ours: list[tuple[ConsumedRecord, int | None, bool]] = []
        for msg in messages:
            if not self._may_be_ours(msg):
                continue
            if msg.topic != results:
                ours.append((msg, None, False))
                continue
            submitted = submission_of(msg.headers)
            if asked is None or submitted is None:
                ours.append((msg, submitted, asked is None))
            elif submitted == asked:
                ours.append((msg, submitted, True))
            # else another submission of this job id: not read at all
        bodies = iter(read_result_bodies([msg.value for msg, _, read in ours if read]))
        for msg, submitted, read in ours:
            if msg.topic == results:
                reused = header_of(msg.headers, REUSED_HEADER) is not None
                self._add_result(msg.value, submitted, next(bodies) if read else None, read, reused)
            elif msg.topic == dead_letters:
                self._add_dead(msg.value)
            if self._db is not None:
                self._pending += 1
                if self._pending >= _COMMIT_EVERY:
                    self._db.commit()
                    self._pending = 0
            elif self._held > self.memory_bytes:
                self._spill()

    def _may_be_ours(self, msg: ConsumedRecord) -> bool:
        """Skip other jobs' records without decoding them, by header or key where they tell."""
        job_id = header_of(msg.headers, "job_id")
        if job_id is not None:
            return job_id == self._job_bytes
        key = msg.key
        return key is None or b"/" not in key or key.startswith(self._job_prefix)

    def _kept(self, record_id: str) -> tuple[int, str | None] | None:
        if self._db is None:
            row = self._rows.get(record_id)
            return None if row is None else (row[1], row[2])
        found = self._db.execute("SELECT dead, version FROM records WHERE record_id = ?", (record_id,)).fetchone()
        return None if found is None else (found[0], found[1])

    def _add_result(
        self, value: bytes, submitted: int | None, body: ResultBody | None, read: bool, reused: bool
    ) -> None:
        # The encoded value is kept as it came: the output is written from its bytes in chunks
        # (results/rows.py). Its leading fields and layout are read by hand (`body` when its
        # chunk's reading did, else here when `read`); the submission from the header the GPU
        # worker writes (the result's own `submitted` stamp: a header naming another submission
        # was skipped unread, whatever the value says). Another writer schema, or no (or a
        # malformed) header where a submission is asked for: the fields decoded whole decide.
        try:
            if body is None and read:
                body = read_result_body(value)
            if body is None:
                fields = decode_fields(value, InferenceResult)
        except SerdeError:
            return
        if body is not None:
            head = body.head
            job_id, record_id, seq, version = head.job_id, head.record_id, head.seq, head.model_version
            batch_id, batch_size = body.batch_id, body.batch_size
        else:
            job_id, record_id, seq, version = (
                fields["job_id"],
                fields["record_id"],
                fields["seq"],
                fields["model_version"],
            )
            batch_id, batch_size = fields["batch_id"], fields["batch_size"]
            submitted = fields["timestamps"].get("submitted", self.submission)
        if job_id != self.job_id or self.model_version not in (None, version):
            return
        if self.submission is not None and submitted != self.submission:
            return
        if self._db is None:
            self._keep_in_memory(record_id, (seq, 0, version, value, body))
        elif not self._keep_in_db(record_id, seq, version, value):
            return
        if reused:  # neither its batch nor its tokens are this job's work
            self.reused += 1
            return
        self._batches[batch_id] = batch_size
        if body is None and fields["finish_reason"]:  # a generation's result is always decoded whole
            self._tokens[record_id] = fields["completion_tokens"]

    def _keep_in_memory(self, record_id: str, row: _Row) -> None:
        kept = self._rows.get(record_id)
        if kept is not None:
            dead, version = kept[1], kept[2]
            if not dead and not wins_over(row[2] or "", version or ""):
                self.duplicates += (version or "") == row[2]
                return
            self._held -= len(kept[3]) + _ROW_OVERHEAD
            if dead:
                self.dead -= 1  # a retried record that succeeded is not dead
            else:
                self.results -= 1
        self._rows[record_id] = row
        self._held += len(row[3]) + _ROW_OVERHEAD
        self.results += 1

    def _keep_in_db(self, record_id: str, seq: float, version: str, value: bytes) -> bool:
        """As _keep_in_memory, in sqlite; whether the result was kept."""
        db = self._db
        assert db is not None
        row = (record_id, seq, version, value)
        # The common case, a record not seen yet, in one statement; a SELECT only when it was.
        if db.execute("INSERT OR IGNORE INTO records VALUES (?, ?, 0, ?, ?)", row).rowcount == 0:
            dead, kept = self._kept(record_id) or (0, None)
            if not dead and not wins_over(version, kept or ""):
                self.duplicates += (kept or "") == version
                return False
            db.execute("INSERT OR REPLACE INTO records VALUES (?, ?, 0, ?, ?)", row)
            if dead:
                self.dead -= 1  # a retried record that succeeded is not dead
                self.results += 1
        else:
            self.results += 1
        return True

    def _add_dead(self, value: bytes) -> None:
        try:
            letter = decode(value, DeadLetter)
        except SerdeError:
            return
        if letter.job_id != self.job_id or letter.record_id is None:
            return
        if self.submission is not None and dead_submission(letter) not in (None, self.submission):
            return
        if self._kept(letter.record_id) is not None:
            return
        self.dead += 1
        seq = dead_seq(letter)
        seq = seq if seq != float("inf") else 2.0**62
        if self._db is None:
            self._rows[letter.record_id] = (seq, 1, None, value, None)
            self._held += len(value) + _ROW_OVERHEAD
        else:
            self._db.execute("INSERT INTO records VALUES (?, ?, 1, NULL, ?)", (letter.record_id, seq, value))

    def rows(self) -> Iterator[OutputRow]:
        """Every record in the job's input order (seq, then record id), as its encoded value."""
        if self._db is None:
            order = sorted(self._rows.items(), key=lambda item: (item[1][0], item[0]))
            for _, (_, dead, _, value, body) in order:
                yield OutputRow(value, bool(dead), body)
            return
        self._db.commit()
        self._db.execute("CREATE INDEX IF NOT EXISTS by_seq ON records (seq, record_id)")
        for dead, value in self._db.execute("SELECT dead, value FROM records ORDER BY seq, record_id"):
            yield OutputRow(value, bool(dead), None)

    def outcomes(self) -> dict[str, DeadLetter | None]:
        """Every record that has an outcome: its dead letter, or None for a result."""
        if self._db is None:
            rows: Iterable[tuple[str, int, bytes]] = ((rid, row[1], row[3]) for rid, row in self._rows.items())
        else:
            self._db.commit()
            rows = self._db.execute("SELECT record_id, dead, value FROM records")
        return {rid: decode(value, DeadLetter) if dead else None for rid, dead, value in rows}

    def ordered(self) -> Iterator[InferenceResult | DeadLetter]:
        """Every record in the job's input order, decoded one at a time."""
        for row in self.rows():
            yield row.item()

    def example(self) -> InferenceResult | None:
        """The job's result of the lowest record id (it sets the columns of a columnar output), None
        if it has none. Ordered on purpose: the order the topics gave would change which result
        sets the columns."""
        if self._db is None:
            ids = [rid for rid, row in self._rows.items() if not row[1]]
            values: Iterable[bytes] = (self._rows[rid][3] for rid in _lowest_first(ids))
        else:
            values = (row[0] for row in self._db.execute("SELECT value FROM records WHERE dead = 0 ORDER BY record_id"))
        for value in values:
            with contextlib.suppress(ValueError):  # one that cannot be written is an error row
                return writable_result(value)
        return None

    def close(self) -> None:
        self._rows.clear()
        if self._db is not None:
            self._db.close()
        if self._dir is not None:
            self._dir.cleanup()

    def __enter__(self) -> ResultSpill:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _lowest_first(ids: list[str]) -> Iterator[str]:
    """The lowest id, then (only when the caller asks on: that one could not be written) all of
    them in order: a job's ids are sorted only in that rare case, not on every export."""
    if ids:
        yield min(ids)
        yield from sorted(ids)


class NoRecordsError(LookupError):
    """A job id the registry does not know, with no result or dead letter either (exit 1)."""


def read_results(
    settings: KafkaSettings,
    topics: Topics,
    job_id: str,
    job: Job | None,
    *,
    model_version: str | None = None,
    directory: Path | None = None,
) -> ResultSpill:
    """The job's results and dead letters in a spill (the caller closes it), to be written in input
    order. `job`: the registry's, looked up by the caller (this room reads no registry). A job id
    submitted again holds its latest submission's records; an unregistered job id (None), every
    record of that id, and NoRecordsError when there is none."""
    submission = job.submission if job is not None else None
    kept = KeptColumns.of(job.columns) if job is not None else None
    memory_bytes = int(os.environ.get(ENV_MEMORY_BYTES, MEMORY_BYTES))
    spill = ResultSpill(job_id, model_version, submission, directory, kept, memory_bytes)
    try:
        spill.add(read_topics(settings, [topics.results, topics.dead_letters]), topics)
        if job is None and not spill.done:
            raise NoRecordsError(f"no job {job_id} in {topics.jobs}, and no result or dead letter of it")
    except BaseException:
        spill.close()
        raise
    return spill
