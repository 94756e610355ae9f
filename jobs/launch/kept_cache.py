"""`nearline run` keeps its model's results cache between runs (docs/reuse.md). Its embedded broker
is memory-only, so what cache.<model> holds at the end of a run is written to a file
(reuse/kept.py) in the per-user cache folder, and produced back into the next run's broker before
its workers start: the second run of the same file reuses every result the first one computed.

Best effort, as the cache is everywhere: a file that cannot be read or written is said, and the
run computes what it would have reused; the run's own results never depend on it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from kafka_io.clients import make_producer
from kafka_io.errors import KAFKA_FAULTS
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import RUNTIME_RECORD_KEY, OutRecord
from kafka_io.result_cache import cache_topic
from kafka_io.settings import KafkaSettings
from kafka_io.topics import ensure_topics
from kafka_io.topology import Topics
from model_repository.folders import user_cache
from reuse.kept import KeptCacheError, read_kept, write_kept

ENV_RESULTS_CACHE = "NEARLINE_RESULTS_CACHE"
# a folder that cannot be written, a broker that does not answer the read: the cache is not kept
KEEP_FAULTS: tuple[type[Exception], ...] = (OSError, ValueError, *KAFKA_FAULTS)


def kept_folder() -> Path:
    """$NEARLINE_RESULTS_CACHE if set, else `results` in the per-user cache, beside the models
    ($XDG_CACHE_HOME/nearline/results, else ~/.cache/nearline/results)."""
    if os.environ.get(ENV_RESULTS_CACHE):
        return Path(os.environ[ENV_RESULTS_CACHE])
    return user_cache() / "results"


def kept_file(model: str) -> Path:
    return kept_folder() / f"{model}.cache"


def restore_cache(settings: KafkaSettings, topics: Topics, model: str, log: Callable[[str], None]) -> int:
    """Produce the model's kept cache into cache.<model> (made here, as a GPU worker makes it);
    the results produced. A file that is not one, or ends inside an entry, gives what it held
    before that, with a warning."""
    path = kept_file(model)
    if not path.is_file():
        return 0
    spec = cache_topic(topics, model)
    problem: list[str] = []

    def records() -> Iterator[OutRecord]:
        try:
            for key, value in read_kept(path):
                yield OutRecord(spec.name, value, key)
        except (OSError, KeptCacheError) as exc:
            problem.append(str(exc))

    try:
        ensure_topics(settings, [spec])
        # counted by key: the engine's record (RUNTIME_RECORD_KEY) is not a result
        restored = produce_all(make_producer(settings), records(), weight=lambda key: key != RUNTIME_RECORD_KEY)
    except KAFKA_FAULTS as exc:
        log(f"warning: the results kept in {path} were not restored ({exc}): this run computes them")
        return 0
    if problem:
        log(f"warning: {problem[0]}; {restored} results restored from it, the rest computed")
    elif restored:
        log(f"{restored:,} results kept from earlier runs ({path})")
    return restored


def keep_cache(settings: KafkaSettings, topics: Topics, model: str, log: Callable[[str], None]) -> int:
    """Write what cache.<model> holds to the model's kept file, for the next run; the entries
    written (one a key: the last)."""
    path = kept_file(model)
    records = read_topics(settings, [topics.cache(model)], idle_timeout_s=15.0)
    try:
        return write_kept(path, ((r.key, None if r.deleted else r.value) for r in records if r.key is not None))
    except KEEP_FAULTS as exc:
        log(f"warning: the results cache was not kept in {path} ({exc}): the next run computes what it would reuse")
        return 0
