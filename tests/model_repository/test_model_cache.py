"""The model repository is one per user: found from any folder, moved by an env var, exported once;
models left in ./models (the old default) are pointed at, not exported again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from model_repository.folders import default_repository, move_hint
from tests.support.columnar_check import assert_columnar_equals_jsonl

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "producers" / "examples" / "python-docs-paragraphs.jsonl"


def user_env(home: Path) -> dict[str, str]:
    """A user with an empty cache and nothing nearline-specific set, as on a fresh machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARLINE_") and k != "XDG_CACHE_HOME"}
    return {**env, "HOME": str(home), "PYTHONPATH": str(ROOT)}


def nearline(*args: str, cwd: Path, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_default_repository_is_the_users_cache_unless_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NEARLINE_MODEL_REPOSITORY", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_repository() == tmp_path / "home" / ".cache" / "nearline" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored, as the XDG spec says
    assert default_repository() == tmp_path / "home" / ".cache" / "nearline" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_repository() == tmp_path / "xdg" / "nearline" / "models"
    monkeypatch.setenv("NEARLINE_MODEL_REPOSITORY", str(tmp_path / "mine"))
    assert default_repository() == tmp_path / "mine"


@pytest.mark.process
def test_models_left_in_the_old_folder_are_pointed_at_with_the_move_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / "nearline" / "models"
    assert move_hint(cache, "minilm") is None  # no ./models: nothing to move
    (tmp_path / "models" / "minilm" / "1").mkdir(parents=True)
    assert move_hint(tmp_path / "chosen", "minilm") is None  # a repository the user named is theirs
    hint = move_hint(cache, "minilm")
    assert hint is not None and f"mv models/* {cache}/" in hint and "--model-repository models" in hint
    assert move_hint(cache, "efficientnet-lite0") is None  # ./models does not hold that one
    assert move_hint(Path("models"), "minilm") is None  # ./models is the repository in use
    assert move_hint(cache) is not None  # any model, for `models list`

    home = tmp_path / "home"
    listed = nearline("models", "list", cwd=tmp_path, env=user_env(home))
    assert listed.returncode == 0, listed.stderr
    assert f"mv models/* {home}/.cache/nearline/models/" in listed.stderr
    assert f"{home}/.cache/nearline/models" in listed.stderr  # says where it looked

    run = nearline("run", str(EXAMPLE), "--model", "minilm", cwd=tmp_path, env=user_env(home))
    assert run.returncode == 3, run.stderr  # model unavailable, said before anything starts
    assert "mv models/*" in run.stderr and "preparing" not in run.stderr
    assert not (home / ".cache" / "nearline" / "models" / "minilm").exists()


@pytest.mark.real_model
@pytest.mark.timeout(900)
def test_run_from_two_folders_exports_the_model_once_into_the_users_cache(tmp_path: Path) -> None:
    home, first, second = tmp_path / "home", tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
    source = tmp_path / "in.jsonl"
    source.write_text("".join(EXAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[:20]), encoding="utf-8")
    args = ("run", str(source), "--model", "minilm", "--job-id", "same-job")

    one = nearline(*args, "-o", "out.parquet", cwd=first, env=user_env(home), timeout=800)
    assert one.returncode == 0, one.stderr
    assert "preparing it (once)" in one.stderr
    onnx = home / ".cache" / "nearline" / "models" / "minilm" / "1" / "model.onnx"
    exported = onnx.stat()

    # computed again, not reused from the cache the first run kept in the same home (docs/reuse.md)
    two = nearline(*args, "--no-reuse", "-o", "out.jsonl", cwd=second, env=user_env(home), timeout=300)
    assert two.returncode == 0, two.stderr
    assert "preparing" not in two.stderr
    assert (onnx.stat().st_ino, onnx.stat().st_mtime_ns) == (exported.st_ino, exported.st_mtime_ns)
    assert not (first / "models").exists() and not (second / "models").exists()
    assert (home / ".cache" / "nearline" / "results" / "minilm.cache").is_file()  # beside the models
    # the same records through the same cached model: `run -o .parquet` equals `run -o .jsonl`
    assert_columnar_equals_jsonl(first / "out.parquet", second / "out.jsonl", ["embedding"])
