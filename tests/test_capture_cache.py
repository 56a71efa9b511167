"""A config file's captured variables are reused while no file of its folder changed (mlrepro/runs/capture_cache.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlrepro.core import private_dir
from mlrepro.runs import capture_cache, implementation
from mlrepro.runs.implementation import ImplementationError, capture


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "mlrepro" / "config-captures"


def _folder(tmp_path: Path, value: str = "8") -> Path:
    # NVIDIA's shape: the config file sources a shared file of its folder, found through BASH_SOURCE
    folder = tmp_path / "impl"
    (folder / "scripts").mkdir(parents=True, exist_ok=True)
    (folder / "config_DGXA100_common.sh").write_text(f"export DGXNGPU={value}\n")
    (folder / "scripts" / "extra.sh").write_text("export EXTRA=1\n")
    (folder / "config_DGXA100.sh").write_text(
        'here=$(dirname ${BASH_SOURCE[0]})\nsource $here/config_DGXA100_common.sh\nsource $here/scripts/extra.sh\n'
        'export DGXNNODES=1\necho hello\n')
    return folder / "config_DGXA100.sh"


def _no_bash(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> dict[str, str]:
        raise AssertionError("bash ran although the cache holds this capture")

    monkeypatch.setattr(implementation, "_bash_env", refuse)


def test_a_config_is_sourced_once_while_its_folder_is_unchanged(cache: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    config = _folder(tmp_path)
    first = capture(config)
    assert first["DGXNGPU"] == "8" and first["DGXNNODES"] == "1"
    assert len(list(cache.glob("*.json"))) == 1
    _no_bash(monkeypatch)
    assert capture(config) == first


@pytest.mark.parametrize("change", ["sourced file", "nested file", "new file"])
def test_any_change_in_the_folder_sources_it_again(cache: Path, tmp_path: Path, change: str) -> None:
    config = _folder(tmp_path)
    assert capture(config)["DGXNGPU"] == "8"
    common = config.with_name("config_DGXA100_common.sh")
    if change == "sourced file":  # same size, same second: the nanoseconds and the inode still tell
        common.write_text("export DGXNGPU=4\n")
        stat = common.stat()
        os.utime(common, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
        assert capture(config)["DGXNGPU"] == "4"
    elif change == "nested file":  # a config file may source one below its folder
        (config.parent / "scripts" / "extra.sh").write_text("export EXTRA=22\n")
        assert capture(config)["EXTRA"] == "22"
    else:
        (config.parent / "README.md").write_text("notes\n")
        assert capture(config)["DGXNGPU"] == "8"
        assert len(list(cache.glob("*.json"))) == 2


def test_a_damaged_entry_is_captured_again(cache: Path, tmp_path: Path) -> None:
    config = _folder(tmp_path)
    first = capture(config)
    for damage in ("{not json", '["a list"]', '{"DGXNGPU": 8}'):
        (entry,) = cache.glob("*.json")
        entry.write_text(damage)
        assert capture(config) == first
    (entry,) = cache.glob("*.json")
    assert capture_cache.get(entry.stem) == first


def test_a_cache_folder_that_cannot_be_written_only_costs_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # mkdir under a file fails, for root too
    config = _folder(tmp_path)
    assert capture(config)["DGXNGPU"] == "8"
    assert capture(config)["DGXNGPU"] == "8"


def test_a_failing_config_is_not_remembered(cache: Path, tmp_path: Path) -> None:
    config = _folder(tmp_path)
    good = config.read_text()
    config.write_text(good + "exit 3\n")
    for _ in range(2):
        with pytest.raises(ImplementationError, match=r"config_DGXA100\.sh: sourcing it with bash failed \(exit 3\)"):
            capture(config)
    assert not list(cache.glob("*.json"))
    config.write_text(good)
    assert capture(config)["DGXNNODES"] == "1"


def test_the_cache_leaves_the_warm_starts_runtime_folder_private(cache: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Planning captures first; the warm start's private folder is the same ~/.cache/mlrepro and refuses one
    # open to others: every run of the machine would then start cold.
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    capture(_folder(tmp_path))
    assert (cache.parent.stat().st_mode & 0o777) == 0o700
    assert private_dir.base() == cache.parent
