"""A model version's fingerprint: one BLAKE2b-256 digest over everything of it that decides its
results, so that a result is reused only by the model that would write the same bytes.

What enters it:
- every file of the version's folder by its bytes, named by its path there: the weights
  (model.onnx, the TorchScript traces, a causal LM's safetensors), the tokenizer files, the labels,
  a causal LM's chat template. The folder's own config.json is read as fields instead (below), and
  hidden entries (an import under way) are left out.
- the config's fields, all but those that cannot change a result (OUTPUT_NEUTRAL_FIELDS): pooling
  and postprocessing, the tokenizer's max length and pad id, image preprocessing (resize, crop,
  resample, background, JPEG draft), the labels file's name and top_k, the inputs and outputs,
  length buckets, a causal LM's context, end-of-sequence ids and default completion length. A
  field added to ModelConfig later enters it unless it is named neutral, so a new setting can only
  make reuse rarer, never wrong.
The engine that runs the version (ONNX Runtime, TensorRT in FP16...) is not a part of it: the
preprocess worker that computes it does not know which engine will; the cache key joins it to a
record's reuse key (reuse/keys.py CacheKeys).

A file's digest is computed once, streaming, and kept by (path, size, mtime_ns, inode): a model
version's folder is written once by `models import` and replaced whole by `--replace`, so a file
rewritten in place with the same size and modification time is not a case the cache guards. The
import records each file's digest in the folder (DIGESTS_FILE, beside the files it names), so a
worker that fingerprints the version reads none of them: a causal LM's weights are gigabytes, and
every preprocess worker fingerprints each model it serves. A recorded digest counts only while its
file keeps the size and modification time it was recorded with; any other file is read.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from model_repository.config import CONFIG_FILE, ModelConfig

# Fields that cannot change a result: the model's name and version enter the key apart, and
# max_batch_size, source and directory say how many records run at once, where the model came
# from and where it is now.
OUTPUT_NEUTRAL_FIELDS = ("name", "version", "max_batch_size", "source", "directory")
DIGEST_SIZE = 32


@dataclass(frozen=True)
class ModelFingerprint:
    """What a reuse key takes from the model: its name and version, the digest over what changes its
    outputs, and a causal LM's default completion length (a request that names none gets it)."""

    name: str
    version: str
    digest: bytes
    default_max_tokens: int = 0


class FileDigests:
    """BLAKE2b-256 of files' bytes, each read once and kept by (path, size, mtime_ns, inode)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int, int], bytes] = {}
        self.files_read = 0

    def of(self, path: Path) -> bytes:
        stat = path.stat()
        known = (str(path.absolute()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
        digest = self._known.get(known)
        if digest is None:
            with path.open("rb") as f:
                digest = hashlib.file_digest(f, lambda: hashlib.blake2b(digest_size=DIGEST_SIZE)).digest()
            self._known[known] = digest
            self.files_read += 1
        return digest


_DIGESTS = FileDigests()

# Hidden (so never a file of the fingerprint itself): {relative path: [size, mtime_ns, hex digest]}
DIGESTS_FILE = ".digests.json"


def record_digests(directory: Path) -> None:
    """Write the digests of the version's files (model_files) into its DIGESTS_FILE."""
    digests = FileDigests()  # one use: the folder is a scratch one, renamed into place after
    entries = {}
    for path in model_files(directory):
        stat = path.stat()
        entries[path.relative_to(directory).as_posix()] = [stat.st_size, stat.st_mtime_ns, digests.of(path).hex()]
    (directory / DIGESTS_FILE).write_text(json.dumps(entries, sort_keys=True), encoding="utf-8")


def recorded_digests(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    """The version's recorded digests by relative path; none where its DIGESTS_FILE is missing or
    unreadable (its files are then read)."""
    try:
        entries = json.loads((directory / DIGESTS_FILE).read_text(encoding="utf-8"))
        return {path: (int(size), int(mtime), bytes.fromhex(digest)) for path, (size, mtime, digest) in entries.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def model_files(directory: Path) -> list[Path]:
    """The files of a version's folder that enter its fingerprint, by relative path (its
    config.json and hidden entries aside), through linked folders too."""
    found, seen = [], {os.path.realpath(directory)}
    # a folder linked in (a causal LM's folder kept elsewhere) holds weights too; a link back up
    # the tree is walked once
    for parent, folders, files in os.walk(directory, followlinks=True):
        folders[:] = [d for d in folders if not d.startswith(".") and _first_visit(Path(parent) / d, seen)]
        for name in files:
            path = Path(parent) / name
            if not name.startswith(".") and path != directory / CONFIG_FILE:
                found.append(path)
    return sorted(found, key=lambda p: p.relative_to(directory).as_posix())


def _first_visit(folder: Path, seen: set[str]) -> bool:
    real = os.path.realpath(folder)
    if real in seen:
        return False
    seen.add(real)
    return True


def config_fields(config: ModelConfig) -> bytes:
    """The config's fields that can change a result, as canonical JSON."""
    fields = {k: v for k, v in asdict(config).items() if k not in OUTPUT_NEUTRAL_FIELDS}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def model_fingerprint(config: ModelConfig, digests: FileDigests | None = None) -> ModelFingerprint:
    """The fingerprint of the model version `config` was loaded from (its directory's files)."""
    digests = digests or _DIGESTS
    h = hashlib.blake2b(digest_size=DIGEST_SIZE)
    h.update(length_prefixed(b"nearline.model.v1"))
    h.update(length_prefixed(config_fields(config)))
    recorded = recorded_digests(config.directory)
    for path in model_files(config.directory):
        name = path.relative_to(config.directory).as_posix()
        h.update(length_prefixed(name.encode()))
        h.update(length_prefixed(_recorded(recorded.get(name), path) or digests.of(path)))
    max_tokens = config.generation.default_max_tokens if config.generation is not None else 0
    return ModelFingerprint(config.name, config.version, h.digest(), max_tokens)


def _recorded(entry: tuple[int, int, bytes] | None, path: Path) -> bytes | None:
    """The recorded digest of `path`, if the file still has the size and modification time it had."""
    if entry is None:
        return None
    stat = path.stat()
    size, mtime_ns, digest = entry
    return digest if (stat.st_size, stat.st_mtime_ns) == (size, mtime_ns) and len(digest) == DIGEST_SIZE else None


def length_prefixed(value: bytes) -> bytes:
    """`value` after its length (8 bytes, big-endian): fields so written never run into each other."""
    return len(value).to_bytes(8, "big") + value
