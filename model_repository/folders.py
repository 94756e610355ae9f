"""The model repository on disk, as every stage reads it: where it is by default, a model's
versions (folders with a config), a version's config loaded and checked, a classifier's labels.
The config itself, and the names of the files in a version's folder, are config.py's."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from model_repository.config import (
    CONFIG_FILE,
    ModelConfig,
    ModelNotFoundError,
    ModelUnavailableError,
    check_model_name,
    check_model_version,
    is_model_name,
    is_model_version,
)
from model_repository.versions import VERSION_RULE, default_version, ordered_versions

# Where models were kept before the per-user cache: ./models of whatever folder a command ran in
OLD_DEFAULT_REPOSITORY = Path("models")


ENV_MODEL_REPOSITORY = "NEARLINE_MODEL_REPOSITORY"


def user_cache() -> Path:
    """nearline's per-user cache folder: $XDG_CACHE_HOME/nearline, else ~/.cache/nearline (the XDG
    base directory rule: a relative XDG_CACHE_HOME is ignored). The models are kept in it, and
    what else is kept per user (`nearline run`'s results cache)."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    return base / "nearline"


def cache_repository() -> Path:
    """The per-user model cache: user_cache()/models."""
    return user_cache() / "models"


def default_repository() -> Path:
    """$NEARLINE_MODEL_REPOSITORY if set, else the per-user cache."""
    if os.environ.get(ENV_MODEL_REPOSITORY):
        return Path(os.environ[ENV_MODEL_REPOSITORY])
    return cache_repository()


def move_hint(repository: Path, name: str | None = None) -> str | None:
    """How to move models left in ./models (the old default) into the per-user cache when that is
    the repository in use and ./models holds `name` (any model when None); None when there is
    nothing to move, or the repository was chosen (an env var or flag naming another folder)."""
    old = OLD_DEFAULT_REPOSITORY
    try:
        if repository.absolute() != cache_repository().absolute():
            return None
        if not old.is_dir() or old.resolve() == repository.resolve():
            return None
        if name is not None:
            holds = (old / name).is_dir()
        else:
            holds = any(p.is_dir() and is_model_name(p.name) for p in old.iterdir())
    except OSError:
        return None
    if not holds:
        return None
    return (
        f"./models holds models from before nearline kept them in a per-user cache ({repository}): "
        f"move them with `mkdir -p {repository} && mv models/* {repository}/`, "
        "or keep using this folder with --model-repository models (NEARLINE_MODEL_REPOSITORY)"
    )


def version_folder(repository: Path, name: str, version: str) -> Path:
    """<repository>/<name>/<version>, once both are checked to be single segments that stay inside it."""
    return repository / check_model_name(name) / check_model_version(version)


def list_models(repository: Path) -> list[tuple[str, str, ModelConfig | ModelUnavailableError]]:
    """(name, version, config) for every model version in the repository, by name then version; a
    version whose files cannot be loaded comes with the error instead, so it is found here, not by
    a job. A folder whose name is not a model name can never be asked for, so it is not listed."""
    out: list[tuple[str, str, ModelConfig | ModelUnavailableError]] = []
    for folder in sorted(p for p in repository.iterdir() if p.is_dir() and is_model_name(p.name)):
        for version in versions(repository, folder.name):
            try:
                out.append((folder.name, version, load_model_config(repository, folder.name, version)))
            except ModelUnavailableError as exc:
                out.append((folder.name, version, exc))
    return out


def versions(repository: Path, name: str) -> list[str]:
    """Versions of a model that have a config, oldest first (model_repository/versions.py)."""
    folder = repository / name
    if not folder.is_dir():
        return []
    # a hidden folder is an import under way or a replaced version being removed, never a version
    found = [
        p.name for p in folder.iterdir() if p.is_dir() and is_model_version(p.name) and (p / CONFIG_FILE).is_file()
    ]
    return ordered_versions(found)


def load_model_config(repository: Path, name: str, version: str | None = None) -> ModelConfig:
    """The config of `name` at `version`, or at its default version when none is given (the
    highest numbered one: model_repository/versions.py).

    InvalidModelNameError for a name that is not one, ModelNotFoundError for a name the repository
    lacks, ModelUnavailableError for a config.json that cannot be read as a config."""
    check_model_name(name)
    if version is not None:
        check_model_version(version)
    available = versions(repository, name)
    if not available:
        hint = move_hint(repository, name)
        raise ModelNotFoundError(
            f"model {name!r} is not in the model repository {repository}" + (f"; {hint}" if hint else "")
        )
    chosen = version or default_version(available)
    if chosen is None:
        raise ModelNotFoundError(
            f"model {name!r} has no numbered version to serve by default ({', '.join(available)} in {repository}): "
            f"import one again with --version N (versions are {VERSION_RULE}), or name one where a version "
            f"can be named ({name}@{available[-1]})"
        )
    if chosen not in available:
        raise ModelNotFoundError(f"model {name!r} has no version {chosen!r} in {repository} ({available})")
    directory = repository / name / chosen
    path = directory / CONFIG_FILE
    try:
        config = ModelConfig.from_dict(json.loads(path.read_text(encoding="utf-8")), directory)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError and UnicodeError are ValueErrors
        raise ModelUnavailableError(f"model unavailable: {name} version {chosen}: {path}: {exc!r}") from None
    read_labels(config)  # a label file that does not match the outputs is found here, not in results
    return config


def write_labels(path: Path, labels: Sequence[str]) -> Path:
    path.write_text(json.dumps(list(labels), ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_labels(config: ModelConfig) -> tuple[str, ...]:
    """A classifier's class names in index order, checked against the width of its output: a
    label too many or too few would shift every name after it. ModelUnavailableError if not."""
    if not config.labels_file:
        return ()
    return _labels_at(config.directory / config.labels_file, config.outputs[0].dims[-1])


@cache
def _labels_at(path: Path, width: str | int) -> tuple[str, ...]:
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            loaded = json.loads(text)
            if not isinstance(loaded, list) or not all(isinstance(x, str) for x in loaded):
                raise ValueError("not a JSON array of strings")
            labels = tuple(loaded)
        else:
            # one name a line; split on "\n" alone: splitlines() also breaks at U+2028, \x1c and others
            labels = tuple(text[:-1].split("\n") if text.endswith("\n") else text.split("\n"))
    except (OSError, ValueError) as exc:
        raise ModelUnavailableError(f"model unavailable: {path}: {exc}") from None
    if isinstance(width, int) and len(labels) != width:
        raise ModelUnavailableError(
            f"model unavailable: {path} holds {len(labels)} labels for the model's {width} outputs"
        )
    return labels
