"""One process makes a cache entry at a time, across debugger sessions.

A large module's symbol file takes a worker seconds of CPU. Two debuggers
started on a new build at once (a pipeline that runs gdb per crash, a second
terminal) would each start a worker and make the same file twice on CPUs the
debuggers want; and a session that ends before its worker does must not
leave the next session to start another. So whoever makes a cache entry
(``symfile.symbol_file_for``: a worker, a debugger that waits, ``sframe
to-dwarf --cache``) holds a lock on a file beside it, keyed as the entry is
(``.sframe-lock-NAME`` for ``NAME.debug``), and looks in the cache again
once it has it; a debugger that finds the lock held follows that maker
(``jobs.Job``) rather than starting one.

The lock is ``flock``'s: the kernel lets it go when its holder dies,
however (SIGKILL included), so a lock file left behind is no stale lock:
the next maker takes it as any other. The holder removes the file before it
lets go, so a process that waited on the removed file checks, once it holds
the lock, that its file is still the one at the path, and tries again if
not. The holder writes its process id in the file, for what a waiting
debugger says (``holder``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["LOCK_PREFIX", "TMP_PREFIX", "lock_path", "tmp_prefix", "holding", "holder",
           "remove_leftovers", "remove_stale"]

LOCK_PREFIX = ".sframe-lock-"
TMP_PREFIX = ".sframe-tmp-"  # a file being written, renamed into place when whole


def _stem(target: str) -> str:
    name = os.path.basename(target)
    return name[:-len(".debug")] if name.endswith(".debug") else name


def lock_path(target: str) -> str:
    """The lock file of cache entry ``target``."""
    return os.path.join(os.path.dirname(target), LOCK_PREFIX + _stem(target))


def tmp_prefix(target: str) -> str:
    """The name prefix of ``target``'s temporary files: named after it, so
    that its next maker can remove what a killed one left (``remove_leftovers``)."""
    return f"{TMP_PREFIX}{_stem(target)}-"


@contextmanager
def holding(target: str) -> Iterator[None]:
    """Hold the lock of cache entry ``target``, waiting while another process
    holds it. Where no lock file can be made (a read-only directory: nothing
    can be written there either) the caller goes on without."""
    path = lock_path(target)
    fd = _acquire(path)
    try:
        yield
    finally:
        if fd is not None:
            try:
                os.unlink(path)
            except OSError:
                pass
            os.close(fd)


def _acquire(path: str) -> int | None:
    import fcntl

    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            mine, there = os.fstat(fd), os.stat(path)
            if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                return fd
        except FileNotFoundError:
            pass  # its holder removed it while this process waited: try again
        except OSError:
            os.close(fd)
            return None
        os.close(fd)


def holder(target: str) -> int | None:
    """The process making cache entry ``target`` now: its id (0 before it
    wrote it), or None when no process holds the lock."""
    return _holder(lock_path(target))


def _holder(path: str) -> int | None:
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else 0
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def remove_leftovers(target: str) -> None:
    """Remove the temporary files of ``target`` a killed maker left (the
    caller holds its lock: no other process is writing them)."""
    directory = os.path.dirname(target) or "."
    prefix = tmp_prefix(target)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def remove_stale(directory: str, max_age: float, now: float) -> int:
    """Remove the lock files in ``directory`` left by makers that died
    (killed: none removes its own otherwise) over ``max_age`` seconds ago
    and that nobody holds; how many. A lock file is only a name: one taken
    again meanwhile is held, and kept."""
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(LOCK_PREFIX):
            continue
        path = os.path.join(directory, name)
        try:
            if now - os.lstat(path).st_mtime <= max_age or _holder(path) is not None:
                continue
            os.unlink(path)
            removed += 1
        except OSError:
            continue
    return removed
