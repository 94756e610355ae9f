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

from model_repository.import_source import ImportRefusedError
from schemas.model_config import CONFIG_FILE, version_folder, versions


class ExportUnavailableError(RuntimeError):
    """The export extra is not installed, or the model package is missing."""


def refuse_existing(repository: Path, name: str, version: str, replace: bool) -> Path:
    """The version's folder, or ImportRefusedError when it is already a version and `replace` is not
    given: a name and version must mean one model, and workers keep what they loaded."""
    target = version_folder(repository, name, version)
    if replace or not (target / CONFIG_FILE).is_file():
        return target
    numeric = [int(v) for v in versions(repository, name) if v.isdigit()]
    suggestion = f"--version {max(numeric) + 1}" if numeric else "another --version"
    raise ImportRefusedError(
        f"{name} version {version} is already in {repository}: import it as {suggestion}, or pass --replace "
        "(workers that already loaded it keep serving the old one until they restart)"
    )


@contextmanager
def staged_version(repository: Path, name: str, version: str, replace: bool) -> Iterator[Path]:
    """A hidden scratch folder of the repository to write the version into (config.json last); when
    the block ends without an error it becomes <repository>/<name>/<version>, else it is removed.

    Nothing is deleted before the new version is complete: a version it replaces is moved aside,
    the new one renamed into its place, and only then the old one removed. Hidden folders are never
    versions (schemas.model_config.versions), so no worker sees a half-written one."""
    target = refuse_existing(repository, name, version, replace)
    repository.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=repository, prefix=".prepare-"))
    try:
        yield scratch
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
