"""Bounds on the symbol-file cache (``$XDG_CACHE_HOME/sframe-gdb/symbols``).

Every module a debugger meets gets a symbol file there (``symfile.py``) and
a rebuilt program gets a new one, so without pruning the directory only
grows. The policy, applied whenever a new file is written (a cache hit only
refreshes the file's modification time, which is its "last used" time):

- a symbol file not used for ``SFRAME_CACHE_DAYS`` days (default 30) goes;
- then the least recently used go until the total is under
  ``SFRAME_CACHE_MAX_MB`` megabytes (default 1024);
- a file used in the last ``KEEP_RECENT`` seconds is never removed, whatever
  the size: another debugger may have just chosen it and not opened it yet
  (one that has it open keeps reading it after the unlink);
- a temporary file of an interrupted write older than a day goes, and so
  does the lock file of a maker killed over a day ago that nobody holds
  (``lock.py``; the next maker of that entry removes both before).

The analysis results kept beside them (``*.analysis``,
``analysis_store.py``: one per module path, the last build's) count and go
the same way. Only names this package writes are touched (``*.debug``,
``*.analysis``, ``.sframe-tmp-*`` of either, ``.sframe-lock-*``); anything else in the directory
is left alone.
Removal races with another debugger's are harmless (a file already gone is
skipped). ``sframe cache`` lists, prunes and clears the cache by hand.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from typing import NamedTuple

from ..base import settings
from . import lock

__all__ = ["Entry", "Policy", "policy", "entries", "touch", "prune", "clear", "KEEP_RECENT"]

DAYS_ENV, SIZE_ENV = "SFRAME_CACHE_DAYS", "SFRAME_CACHE_MAX_MB"
KEEP_RECENT = 600.0  # seconds
_TMP_MAX_AGE = 86400.0


class Entry(NamedTuple):
    path: str
    size: int
    used: float  # modification time: written or last reused
    temporary: bool  # a write that never finished


class Policy(NamedTuple):
    max_age: float  # seconds
    max_bytes: int


def policy() -> Policy:
    """The limits, from the environment (bad values fall back to the defaults)."""
    return Policy((settings.number(DAYS_ENV) or 0.0) * 86400.0,
                  int((settings.number(SIZE_ENV) or 0.0) * 1024 * 1024))


def _ours(name: str) -> bool:
    return name.endswith((".debug", ".analysis")) and "/" not in name


def entries(directory: str) -> list[Entry]:
    """The cache's files, least recently used first (none if there is no directory)."""
    found = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if not _ours(name):
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        found.append(Entry(path, st.st_size, st.st_mtime, name.startswith(lock.TMP_PREFIX)))
    found.sort(key=lambda e: (e.used, e.path))
    return found


def touch(path: str) -> None:
    """Mark a reused file as used now (best effort: a read-only cache still works)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _remove(path: str) -> int:
    try:
        size = os.lstat(path).st_size
        os.unlink(path)
    except FileNotFoundError:
        return 0
    return size


def prune(directory: str, limits: Policy | None = None, *, keep: str | None = None,
          now: Callable[[], float] = time.time) -> tuple[int, int]:
    """Apply the policy to ``directory``; (files removed, bytes freed).

    ``keep``: a file never removed (the one just written). Raises OSError
    only for a failure other than a file already gone (the caller says it
    in one line).
    """
    limits = limits or policy()
    current = now()
    removed = lock.remove_stale(directory, _TMP_MAX_AGE, current)
    freed = 0
    kept: list[Entry] = []
    for entry in entries(directory):
        age = current - entry.used
        if entry.path == keep or age < KEEP_RECENT:
            kept.append(entry)
            continue
        if (entry.temporary and age > _TMP_MAX_AGE) or (not entry.temporary and age > limits.max_age):
            freed += _remove(entry.path)
            removed += 1
        else:
            kept.append(entry)
    total = sum(e.size for e in kept)
    for entry in kept:  # least recently used first
        if total <= limits.max_bytes:
            break
        if entry.path == keep or current - entry.used < KEEP_RECENT or entry.temporary:
            continue
        size = _remove(entry.path)
        total -= entry.size
        freed += size
        removed += 1
    return removed, freed


def clear(directory: str) -> tuple[int, int]:
    """Remove every symbol file (and kept analysis result) of the cache; (files removed, bytes freed)."""
    removed = freed = 0
    for entry in entries(directory):
        freed += _remove(entry.path)
        removed += 1
    return removed, freed
