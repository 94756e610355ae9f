"""Which version of a model is newer and which one is served when none is named
(model_repository/versions.py), and what `models import` and `models list` make of versions and names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model_import.import_source import ImportRefusedError
from model_import.install import refuse_existing
from model_repository.config import CONFIG_FILE, InvalidModelVersionError, ModelNotFoundError
from model_repository.folders import load_model_config, versions
from model_repository.versions import default_version, ordered_versions
from results.outcome import wins_over
from tests.support.tiny_model import TinyModel


def with_versions(repository: Path, tiny: TinyModel, name: str, found: list[str]) -> Path:
    """`name` in `repository` at each version of `found`, each a copy of the tiny model saying its version."""
    for version in found:
        folder = repository / name / version
        shutil.copytree(tiny.config.directory, folder)
        config = json.loads((folder / CONFIG_FILE).read_text())
        (folder / CONFIG_FILE).write_text(json.dumps({**config, "name": name, "version": version}))
    return repository


def test_versions_are_numbers_compared_number_by_number_and_others_are_older() -> None:
    found = ["2", "10", "1.9", "1.10", "v2", "1"]
    assert ordered_versions(found) == ["v2", "1", "1.9", "1.10", "2", "10"]
    assert default_version(found) == "10"
    assert default_version(["1.9", "1.10"]) == "1.10"
    assert default_version(["v2", "beta"]) is None
    assert wins_over("1.10", "1.9") and wins_over("10", "2") and wins_over("1", "v2")
    assert not wins_over("1.9", "1.10")


def test_a_worker_without_a_version_loads_the_highest_number_not_a_name(tmp_path: Path, tiny: TinyModel) -> None:
    repository = with_versions(tmp_path / "models", tiny, "m", ["2", "10", "1.9", "1.10", "v2"])
    assert versions(repository, "m") == ["v2", "1.9", "1.10", "2", "10"]
    assert load_model_config(repository, "m").version == "10"
    assert load_model_config(repository, "m", "v2").version == "v2"  # still served when named


def test_a_model_with_no_numbered_version_is_a_clear_error_not_a_guess(tmp_path: Path, tiny: TinyModel) -> None:
    repository = with_versions(tmp_path / "models", tiny, "m", ["v2", "beta"])
    with pytest.raises(ModelNotFoundError, match=r"no numbered version .*beta, v2.*--version N"):
        load_model_config(repository, "m")


def test_import_refuses_a_version_that_is_not_a_number(tmp_path: Path) -> None:
    for version in ("v2", "1.0-rc1", "latest", "1..2"):
        with pytest.raises(InvalidModelVersionError):
            refuse_existing(tmp_path / "models", "m", version, False)
    refuse_existing(tmp_path / "models", "m", "1.10", False)


def test_import_refuses_a_name_whose_topics_would_collide_with_another_models(tmp_path: Path, tiny: TinyModel) -> None:
    repository = with_versions(tmp_path / "models", tiny, "mini.lm", ["1"])
    for name in ("mini_lm", "mini.lm".replace(".", "_")):
        with pytest.raises(ImportRefusedError, match=r"collides with the model 'mini.lm'.*'\.' and '_'"):
            refuse_existing(repository, name, "1", False)
    refuse_existing(repository, "mini.lm", "2", False)  # a new version of itself
    refuse_existing(repository, "mini-lm", "1", False)  # '-' is not folded


def nearline(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.process
def test_models_list_marks_the_default_version(tmp_path: Path, tiny: TinyModel) -> None:
    repository = with_versions(tmp_path / "models", tiny, "m", ["2", "10", "1.9", "v2"])
    done = nearline("models", "list", "--model-repository", str(repository))
    assert done.returncode == 0, done.stderr
    assert [line.split("\t")[:2] for line in done.stdout.splitlines()] == [
        ["m", "v2"],
        ["m", "1.9"],
        ["m", "2"],
        ["m", "10 (default)"],
    ]
    assert "default is served when none is named" in done.stderr


@pytest.mark.process
def test_models_import_refuses_colliding_names_numberless_versions_and_topics_too_long(
    tmp_path: Path, tiny: TinyModel
) -> None:
    repository = with_versions(tmp_path / "models", tiny, "mini.lm", ["1"])
    folder = tiny.config.directory  # any folder: the name and version are refused before it is read
    where = ("--model-repository", str(repository))
    collides = nearline("models", "import", str(folder), "--name", "mini_lm", *where)
    assert collides.returncode == 2, collides.stderr
    assert "collides with the model 'mini.lm'" in collides.stderr and "Traceback" not in collides.stderr
    numberless = nearline("models", "import", str(folder), "--name", "other", "--version", "v2", *where)
    assert numberless.returncode == 2, numberless.stderr
    assert "is not a number" in numberless.stderr and "Traceback" not in numberless.stderr
    too_long = nearline("models", "import", str(folder), "--name", "x" * 100, *where, NEARLINE_NAMESPACE="n" * 140)
    assert too_long.returncode == 2, too_long.stderr
    assert "over Kafka's limit of 249" in too_long.stderr
    assert sorted(p.name for p in repository.iterdir()) == ["mini.lm"]
