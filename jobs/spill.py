"""A job's results with memory bounded by the job's size on disk, not in RAM: one sqlite row per
record id, read back in input order through an index. A result's row holds the fields it was
decoded into once (marshal), so writing it out does not run fastavro a second time; a dead
letter's row holds its encoded value.

The rules are JobOutcome's (the first copy wins, the newest model version wins unless one is asked
for, a result replaces a dead letter, only the given submission counts); what differs is where
the records wait between reading the topics and writing them out.
"""

from __future__ import annotations

import io
import marshal
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

from jobs.kept import KeptColumns
from jobs.output import OutputFormat
from jobs.registry import JobNotFoundError, load_jobs
from jobs.results import dead_seq, dead_submission, wins_over, write_items
from kafka_io.reading import read_topics
from kafka_io.records import ConsumedRecord
from kafka_io.settings import KafkaSettings, Topics
from schemas import DeadLetter, InferenceResult, Job, SerdeError, decode
from schemas.serde import decode_fields

_COMMIT_EVERY = 10_000  # rows per transaction: fewer fsync-free commits, bounded journal


class ResultSpill:
    """Results and dead letters of one job, spilled to a temporary sqlite file as they are read."""

    def __init__(
        self,
        job_id: str,
        model_version: str | None = None,
        submission: int | None = None,
        directory: Path | None = None,
        kept: KeptColumns | None = None,
    ) -> None:
        self.job_id, self.model_version, self.submission = job_id, model_version, submission
        self.kept = kept  # the input columns the job keeps, for its outputs
        self.results = self.dead = self.duplicates = 0
        self.parent = Path(directory or tempfile.gettempdir())
        self._dir = tempfile.TemporaryDirectory(prefix="nearline-results-", dir=self.parent)
        self._db = sqlite3.connect(Path(self._dir.name) / "spill.sqlite")
        # a scratch file: nothing to recover after a crash, so no journal and no fsync. A rowid
        # table, not WITHOUT ROWID: a row holds a whole encoded result (1.5 KiB for a 384-float
        # embedding), and a WITHOUT ROWID b-tree of rows that large is slower to insert into
        # (sqlite.org/withoutrowid.html): 46 -> 26 us a result in ResultSpill.add.
        self._db.executescript(
            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-16000;"
            "CREATE TABLE records (record_id TEXT PRIMARY KEY, seq REAL NOT NULL, dead INTEGER NOT NULL,"
            " version TEXT, value BLOB NOT NULL);"
        )
        self._pending = 0
        self._job_prefix = f"{job_id}/".encode()
        self._batches: dict[str, int] = {}

    @property
    def done(self) -> int:
        return self.results + self.dead

    @property
    def failed(self) -> int:
        return self.dead

    def batch_sizes(self) -> dict[str, int]:
        return dict(self._batches)

    def add(self, messages: Iterable[ConsumedRecord], topics: Topics) -> None:
        for msg in messages:
            if not self._may_be_ours(msg):
                continue
            if msg.topic == topics.results:
                self._add_result(msg.value)
            elif msg.topic == topics.dead_letters:
                self._add_dead(msg.value)
            self._pending += 1
            if self._pending >= _COMMIT_EVERY:
                self._db.commit()
                self._pending = 0

    def _may_be_ours(self, msg: ConsumedRecord) -> bool:
        """Skip other jobs' records without decoding them, by header or key where they tell."""
        job_id = msg.job_id
        if job_id is not None:
            return job_id == self.job_id
        key = msg.key
        return key is None or b"/" not in key or key.startswith(self._job_prefix)

    def _kept(self, record_id: str) -> tuple[int, str | None] | None:
        row = self._db.execute("SELECT dead, version FROM records WHERE record_id = ?", (record_id,)).fetchone()
        return None if row is None else (row[0], row[1])

    def _add_result(self, value: bytes) -> None:
        # The fields, not the InferenceResult: the dataclass and its tensors would be made only to
        # read six fields. They are kept as marshal's bytes: a second Avro decode for the write out
        # cost ~10 us a 384-float result (fastavro walks the schema on every call), marshal's
        # dumps and loads ~2 us each. The file is this process's own scratch, never read by another
        # Python, so marshal's per-version format is no concern.
        try:
            fields = decode_fields(value, InferenceResult)
        except SerdeError:
            return
        version = fields["model_version"]
        if fields["job_id"] != self.job_id or self.model_version not in (None, version):
            return
        if self.submission is not None and fields["timestamps"].get("submitted", self.submission) != self.submission:
            return
        row = (fields["record_id"], fields["seq"], version, marshal.dumps(fields))
        # The common case, a record not seen yet, in one statement; a SELECT only when it was.
        if self._db.execute("INSERT OR IGNORE INTO records VALUES (?, ?, 0, ?, ?)", row).rowcount == 0:
            dead, kept = self._kept(fields["record_id"]) or (0, None)
            if not dead and not wins_over(version, kept or ""):
                self.duplicates += (kept or "") == version
                return
            self._db.execute("INSERT OR REPLACE INTO records VALUES (?, ?, 0, ?, ?)", row)
            if dead:
                self.dead -= 1  # a retried record that succeeded is not dead
                self.results += 1
        else:
            self.results += 1
        self._batches[fields["batch_id"]] = fields["batch_size"]

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
        self._db.execute(
            "INSERT INTO records VALUES (?, ?, 1, NULL, ?)",
            (letter.record_id, seq if seq != float("inf") else 2.0**62, value),
        )

    def ordered(self) -> Iterator[InferenceResult | DeadLetter]:
        """Every record in the job's input order, decoded one at a time."""
        self._db.commit()
        self._db.execute("CREATE INDEX IF NOT EXISTS by_seq ON records (seq, record_id)")
        for dead, value in self._db.execute("SELECT dead, value FROM records ORDER BY seq, record_id"):
            yield decode(value, DeadLetter) if dead else _result(value)

    def example(self) -> InferenceResult | None:
        """The job's result of the lowest record id (it sets the columns of a columnar output), None
        if it has none. Ordered on purpose: a rowid table's scan is in insertion order, and the
        result that sets the columns would change with the order the topics gave."""
        row = self._db.execute("SELECT value FROM records WHERE dead = 0 ORDER BY record_id LIMIT 1").fetchone()
        return None if row is None else _result(row[0])

    def close(self) -> None:
        self._db.close()
        self._dir.cleanup()

    def __enter__(self) -> ResultSpill:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _result(kept: bytes) -> InferenceResult:
    """A result back from its row: the fields _add_result decoded, as marshal wrote them."""
    return InferenceResult.from_avro(marshal.loads(kept))


def keep_elsewhere(spill: ResultSpill, wanted: Path, fmt: OutputFormat) -> tuple[Path, int]:
    """Write the spill's records to a new folder beside the spill itself, as a file named like wanted:
    where a run's results go when wanted's filesystem cannot take them. That folder held them all
    (in sqlite) during the run, so it most likely has room. (path, records); OSError if not."""
    folder = Path(tempfile.mkdtemp(prefix="nearline-kept-", dir=spill.parent))
    path = folder / wanted.name
    try:
        return path, write_items(spill.ordered(), spill.example(), path, io.StringIO(), fmt, spill.kept)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def write_results(
    settings: KafkaSettings,
    topics: Topics,
    job_id: str,
    path: Path | None,
    out: IO[str],
    fmt: OutputFormat = OutputFormat.JSONL,
    *,
    model_version: str | None = None,
    directory: Path | None = None,
) -> tuple[ResultSpill, Job | None]:
    """Read the job's results and dead letters through a spill, then write them in input order to
    path, or to out (see write_items); returns the (closed) spill for its counts, and the job. A job
    id submitted again writes its latest submission's records; an unregistered job id, every record
    of that id, and JobNotFoundError (nothing written) when there is none."""
    job = load_jobs(settings, topics).get(job_id)
    submission = job.submission if job is not None else None
    kept = KeptColumns.of(job.columns) if job is not None else None
    with ResultSpill(job_id, model_version, submission, directory, kept) as spill:
        spill.add(read_topics(settings, [topics.results, topics.dead_letters]), topics)
        if job is None and not spill.done:
            raise JobNotFoundError(f"no job {job_id} in {topics.jobs}, and no result or dead letter of it")
        write_items(spill.ordered(), spill.example(), path, out, fmt, kept)
    return spill, job
