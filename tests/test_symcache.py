"""The symbol-file cache stays bounded (sframe_core/symfiles/cache.py) and ``sframe cache``."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from helpers import X86

from sframe_core.cli.commands import main
from sframe_core.symfiles import cache as symcache
from sframe_core.symfiles import symfile

DAY = 86400.0
V3 = X86 / "busid-v3"


def _file(directory: Path, name: str, size: int, age_days: float) -> Path:
    path = directory / name
    path.write_bytes(b"\x7fELF" + b"\0" * (size - 4))
    when = time.time() - age_days * DAY
    os.utime(path, (when, when))
    return path


def test_prune_drops_unused_then_least_recently_used(tmp_path: Path) -> None:
    old = _file(tmp_path, "a-old.debug", 100, 40)
    mid = _file(tmp_path, "b-mid.debug", 400, 5)
    new = _file(tmp_path, "c-new.debug", 400, 1)
    fresh = _file(tmp_path, "d-fresh.debug", 400, 0)  # used minutes ago: never removed
    foreign = _file(tmp_path, "notes.txt", 100, 400)
    removed, freed = symcache.prune(str(tmp_path), symcache.Policy(30 * DAY, 900))
    assert (removed, freed) == (2, 500)
    assert not old.exists() and not mid.exists()
    assert new.exists() and fresh.exists() and foreign.exists()


def test_prune_never_removes_recent_or_kept_files(tmp_path: Path) -> None:
    recent = _file(tmp_path, "a.debug", 1000, 0)
    kept = _file(tmp_path, "b.debug", 1000, 60)
    assert symcache.prune(str(tmp_path), symcache.Policy(DAY, 10), keep=str(kept)) == (0, 0)
    assert recent.exists() and kept.exists()


def test_prune_unfinished_writes_after_a_day(tmp_path: Path) -> None:
    stale = _file(tmp_path, ".sframe-tmp-x.debug", 10, 2)
    busy = _file(tmp_path, ".sframe-tmp-y.debug", 10, 0.5)  # maybe still being written
    assert symcache.prune(str(tmp_path), symcache.Policy(30 * DAY, 1 << 30)) == (1, 10)
    assert not stale.exists() and busy.exists()


def test_prune_missing_directory_and_concurrent_pruners(tmp_path: Path) -> None:
    assert symcache.prune(str(tmp_path / "none")) == (0, 0)
    for i in range(200):
        _file(tmp_path, f"{i:03}.debug", 10, 50)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            symcache.prune(str(tmp_path), symcache.Policy(DAY, 0))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and list(tmp_path.iterdir()) == []


def test_policy_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(symcache.DAYS_ENV, "2")
    monkeypatch.setenv(symcache.SIZE_ENV, "0.5")
    assert symcache.policy() == symcache.Policy(2 * DAY, 512 * 1024)
    monkeypatch.setenv(symcache.DAYS_ENV, "soon")
    monkeypatch.setenv(symcache.SIZE_ENV, "-1")
    assert symcache.policy() == symcache.Policy(30 * DAY, 1024 * 1024 * 1024)


def test_symbol_file_for_touches_on_reuse_and_prunes_on_write(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    first = symfile.symbol_file_for(str(V3 / "deep.noeh.stripped"), cache=str(cache))
    when = time.time() - 40 * DAY
    os.utime(first.path, (when, when))
    again = symfile.symbol_file_for(str(V3 / "deep.noeh.stripped"), cache=str(cache))
    assert again.cached and again.path == first.path
    assert time.time() - os.stat(first.path).st_mtime < 60  # used now
    stale = _file(cache, "0000-stale.debug", 100, 40)
    made = symfile.symbol_file_for(str(V3 / "realign.noeh.stripped"), cache=str(cache))
    assert not made.cached and not stale.exists()
    assert os.path.exists(first.path) and os.path.exists(made.path)


def test_cache_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _file(tmp_path, "a-old.debug", 100, 40)
    _file(tmp_path, "b-new.debug", 200, 0)
    assert main(["cache", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in out[:2]] == ["a-old.debug", "b-new.debug"]
    assert out[0].split()[:4] == ["100", "used", "40.0", "days"]
    assert out[2] == f"{tmp_path}: 2 files, 300 bytes"
    assert main(["cache", "--prune", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path}: removed 1 file, 100 bytes\n"
    assert main(["cache", "--clear", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path}: removed 1 file, 200 bytes\n"
    assert list(tmp_path.iterdir()) == []


def test_cache_command_default_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["cache", "--list"]) == 0
    assert capsys.readouterr().out == f"{tmp_path}/sframe-gdb/symbols: 0 files, 0 bytes\n"
    with pytest.raises(SystemExit) as exc:  # one action at a time, as binutils options
        main(["cache", "--prune", "--clear"])
    assert exc.value.code == 2
