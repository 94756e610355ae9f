"""What every install into the model repository shares, whatever it writes (an exported ONNX
model in export.py, a causal LM's transformers folder in causal_lm.py): the refusal of a version
that is already there, the error for a missing export extra, and the staging of a new version in a
hidden folder that is renamed into place only once it is complete and checked."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from model_import.import_source import ImportRefusedError
from model_repository.config import CONFIG_FILE, InvalidModelVersionError, is_model_name
from model_repository.folders import version_folder, versions
from model_repository.versions import VERSION_RULE, default_version, is_numeric_version
from reuse.fingerprint import record_digests


class ExportUnavailableError(RuntimeError):
    """The export extra is not installed, or the model package is missing."""


def refuse_existing(repository: Path, name: str, version: str, replace: bool) -> Path:
    """The version's folder, or ImportRefusedError when it is already a version and `replace` is not
    given: a name and version must mean one model, and workers keep what they loaded. Also refused:
    a version that is not a number (refuse_unordered) and a name whose topics would collide with
    another model's (refuse_colliding)."""
    target = version_folder(repository, name, version)
    refuse_unordered(version)
    refuse_colliding(repository, name)
    if replace or not (target / CONFIG_FILE).is_file():
        return target
    default = default_version(versions(repository, name))
    suggestion = f"--version {int(default.split('.')[0]) + 1}" if default else "another --version"
    raise ImportRefusedError(
        f"{name} version {version} is already in {repository}: import it as {suggestion}, or pass --replace "
        "(workers that already loaded it keep serving the old one until they restart)"
    )


def refuse_unordered(version: str) -> None:
    """InvalidModelVersionError for a version that is not a number: which of `v2` and `10` is newer
    is anyone's guess, and the newest is what a worker serves when no version is named."""
    if not is_numeric_version(version):
        raise InvalidModelVersionError(
            f"model version {version!r} is not a number: versions are {VERSION_RULE}, and the highest is "
            "served when none is named"
        )


def refuse_colliding(repository: Path, name: str) -> None:
    """ImportRefusedError when another model of the repository differs from `name` only in '.'
    against '_': Kafka refuses a topic whose name differs from an existing one's only so, so
    tensors.<name> and the other's tensors topic could not both exist, and the second model's
    records would all be dead letters."""
    if not repository.is_dir():
        return
    twin = next(
        (
            p.name
            for p in sorted(repository.iterdir())
            if p.name != name
            and p.is_dir()
            and is_model_name(p.name)
            and versions(repository, p.name)
            and p.name.replace(".", "_") == name.replace(".", "_")
        ),
        None,
    )
    if twin is not None:
        raise ImportRefusedError(
            f"model name {name!r} collides with the model {twin!r} in {repository}: Kafka treats '.' and '_' in "
            f"topic names as the same, so their tensors topics cannot both exist; choose another name"
        )


@contextmanager
def staged_version(repository: Path, name: str, version: str, replace: bool) -> Iterator[Path]:
    """A hidden scratch folder of the repository to write the version into (config.json last); when
    the block ends without an error it becomes <repository>/<name>/<version>, else it is removed.

    Nothing is deleted before the new version is complete: a version it replaces is moved aside,
    the new one renamed into its place, and only then the old one removed. Hidden folders are never
    versions (model_repository.folders.versions), so no worker sees a half-written one."""
    target = refuse_existing(repository, name, version, replace)
    repository.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=repository, prefix=".prepare-"))
    try:
        yield scratch
        record_digests(scratch)  # what a worker's fingerprint of it then reads instead of its weights
        scratch.chmod(0o755)  # mkdtemp made it private
        refuse_existing(repository, name, version, replace)  # another import may have won meanwhile
        target.parent.mkdir(parents=True, exist_ok=True)
        aside = target.parent / f".replaced-{version}-{scratch.name}" if target.exists() else None
        if aside is not None:
            target.rename(aside)
        try:
            scratch.rename(target)
        except OSError:
            if aside is not None:
                aside.rename(target)
            raise
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
