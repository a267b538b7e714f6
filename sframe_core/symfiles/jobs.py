"""Symbol files made in a worker process, so that a debugger is not held up.

Making a module's symbol file costs time that grows with the module (the
callee-saved-register analysis of every function), and a debugger that waits
for it before its first stop makes a large program's first ``bt`` slow. An
adapter therefore asks the cache first (``symfile.cached_symbol_file``), and
on a miss for a large module starts a ``Job``: a separate Python process runs
``symfile.symbol_file_for`` (so the file lands in the same cache, written
atomically, and a second debugger doing the same meanwhile only ever sees
whole files) while the debugger goes on with its own fallback. The process
also keeps the debugger's Python free: no GIL shared with the unwinder, and
the machine's other cores.

A debugger's embedded Python is rarely a usable ``sys.executable`` (gdb
reports ``/usr/bin/python`` or a build path that does not exist), so the
worker's interpreter is looked for beside it, and it is handed the
directories the adapter itself imported ``sframe_core``, pyelftools and
capstone from, nothing else of the debugger's ``sys.path``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from ..base.errors import SFrameError

if TYPE_CHECKING:
    import subprocess

    from .symfile import ModuleInfo, SymbolFile

# argparse, json, shutil, subprocess and threading are imported where a worker
# is started or run: a debugger imports this module at start-up for
# ``made_at_once`` and the threshold, and most sessions start no worker
# (a warm cache, a small module), so they would cost every start-up ~15 ms.

__all__ = ["JobResult", "Job", "worker_python", "main", "FOREGROUND_FDES", "FOREGROUND_ENV",
           "made_at_once", "symbol_file_now"]

# Below this many FDEs a missing symbol file is made before the debugger goes
# on (a fraction of a second); above it, in a worker while the adapter's own
# unwinder (gdb: the Python unwinder; LLDB 22+: the frame provider) serves.
FOREGROUND_FDES = 300
# The threshold a session starts with, if set (tests send a small program to
# the worker with it, rather than building a large one).
FOREGROUND_ENV = "SFRAME_FOREGROUND_FDES"
# How much lower than the debugger a worker runs (``--nice``).
NICE = 10


def made_at_once(path: str) -> bool:
    """Is the module at ``path`` small enough to make its symbol file now?

    Also True where a worker would gain nothing: the module cannot be read
    (the generation then says what is wrong, at once), or the saved-register
    analysis is off (the file then costs little, and a worker would not know
    it is off).
    """
    from ..format import section as section_module
    if not section_module.SAVED_REGISTERS:
        return True
    try:
        limit = int(os.environ.get(FOREGROUND_ENV, "") or FOREGROUND_FDES)
    except ValueError:
        limit = FOREGROUND_FDES
    fdes = _fde_count(path)
    return fdes is None or fdes <= limit


def _fde_count(path: str) -> int | None:
    """The FDEs of the module's ``.sframe`` (its header alone), or None: no
    such section, or a module that cannot be read (its generation says why)."""
    from ..format.elf import read_elf
    try:
        found = read_elf(path).open()
    except SFrameError:
        return None
    return None if found is None else found.num_fdes


def symbol_file_now(path: str, *, function_symbols: bool = True, before_entry: bool = False,
                    module: ModuleInfo | None = None) -> SymbolFile:
    """``symfile.symbol_file_for``, for an adapter that waits for the file
    (the debugger cannot go on without it): a module large enough to be
    split between processes (``PARALLEL_MIN_FDES``) is made by a worker at
    the debugger's own priority, on every CPU, since a debugger's Python
    cannot fork itself; the rest here, as before. A worker that fails or
    cannot start leaves the module to ``symbol_file_for`` here, which makes
    it or raises what is wrong with it (one line, as always)."""
    from ..format import section as section_module
    from .symfile import PARALLEL_MIN_FDES, cached_symbol_file, default_jobs, symbol_file_for

    if section_module.SAVED_REGISTERS and default_jobs() > 1 \
            and (_fde_count(path) or 0) >= PARALLEL_MIN_FDES:
        result = Job(path, lambda result: None, function_symbols=function_symbols,
                     before_entry=before_entry, nice=0).wait()
        if result.path is not None:
            made = cached_symbol_file(path, function_symbols=function_symbols,
                                      before_entry=before_entry, module=module)
            if made is not None:
                return made._replace(warning=result.warning or made.warning)
    return symbol_file_for(path, function_symbols=function_symbols, before_entry=before_entry,
                           module=module)


class JobResult(NamedTuple):
    """What a worker made: the symbol file, or one line saying why not."""

    path: str | None
    error: str | None = None
    warning: str | None = None


def worker_python() -> str | None:
    """An interpreter of this Python's version (or, failing that, any
    ``python3``) that exists on this machine, or None."""
    for candidate in _interpreters():
        if (candidate and "python" in os.path.basename(candidate) and os.path.isfile(candidate)
                and os.access(candidate, os.X_OK)):
            return candidate
    return None


def _interpreters() -> Iterator[str | None]:
    """``worker_python``'s candidates, best first; ``PATH`` is searched (and
    shutil imported) only when none beside this Python will do."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    yield sys.executable
    yield getattr(sys, "_base_executable", None)
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix):
        yield os.path.join(prefix, "bin", f"python{version}")
        yield os.path.join(prefix, "bin", "python3")
    import shutil

    yield shutil.which(f"python{version}")
    yield shutil.which("python3")


def _import_roots() -> list[str]:
    """The directories holding the packages a worker needs, as this Python found them."""
    roots: list[str] = []
    for name in ("sframe_core", "elftools", "capstone"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin:
            continue
        root = os.path.dirname(os.path.dirname(os.path.abspath(spec.origin)))
        if root not in roots:
            roots.append(root)
    return roots


class Job:
    """One module's symbol file, being made by a worker process.

    ``on_done`` is called once, from a thread of this module (never the
    caller's), with the ``JobResult``; an adapter hands it to its debugger's
    main thread (gdb: ``gdb.post_event``). A worker that cannot be started
    is a ``JobResult`` with an error, reported the same way.
    """

    def __init__(self, path: str, on_done: Callable[[JobResult], None], *,
                 cache: str | None = None, function_symbols: bool = True,
                 before_entry: bool = False, nice: int = NICE) -> None:
        import subprocess
        import threading

        self.path = path
        self.result: JobResult | None = None
        self._on_done = on_done
        self._process: subprocess.Popen[bytes] | None = None
        python = worker_python()
        if python is None:
            self._finish(JobResult(None, "no Python interpreter found to make the symbol file in"))
            return
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(_import_roots())
        env.pop("PYTHONHOME", None)
        args = [python, "-m", "sframe_core.symfiles.jobs", path]
        if cache:
            args += ["--cache", cache]
        if not function_symbols:
            args.append("--no-function-symbols")
        if before_entry:
            args.append("--before-entry")
        args += ["--nice", str(nice)]
        try:
            self._process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, start_new_session=True)  # the terminal's Ctrl-C is the debugger's
        except OSError as exc:
            self._finish(JobResult(None, f"cannot start {python}: {exc.strerror or exc}"))
            return
        # At once, not only once the worker has started Python and imported
        # what it needs (0.2 s of CPU): the debugger comes first from the start.
        if nice:
            _nice_session(self._process.pid, nice)
        self._thread = threading.Thread(target=self._wait, daemon=True,
                                        name=f"sframe symbol file {os.path.basename(path)}")
        self._thread.start()

    def wait(self) -> JobResult:
        """The result, once the worker is done (for a caller that cannot go on without it)."""
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.join()
        assert self.result is not None
        return self.result

    def cancel(self) -> None:
        """Stop the worker (the cache keeps nothing half-written)."""
        process = self._process
        if process is not None and process.poll() is None:
            try:
                process.kill()
            except OSError:
                pass

    def _wait(self) -> None:
        import json

        assert self._process is not None
        out, err = self._process.communicate()
        try:
            answer = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
            result = JobResult(answer.get("path"), answer.get("error"), answer.get("warning"))
        except (ValueError, IndexError, AttributeError):
            lines = err.decode("utf-8", "replace").strip().splitlines()
            result = JobResult(None, f"symbol file worker failed (exit {self._process.returncode})"
                               + (f": {lines[-1]}" if lines else ""))
        self._finish(result)

    def _finish(self, result: JobResult) -> None:
        self.result = result
        self._on_done(result)


def _lower_priority(nice: int) -> None:
    """Lower this worker's priority by ``nice`` (its session's too: ``_nice_session``)."""
    try:
        os.nice(nice)
    except OSError:
        pass
    _nice_session("self", nice)


def _nice_session(pid: int | str, nice: int) -> None:
    """Give the session of process ``pid`` the nice value ``nice``.

    The worker runs in a session of its own (``Job``: the terminal's Ctrl-C
    is the debugger's), and where the kernel groups tasks by session
    (``CONFIG_SCHED_AUTOGROUP``, on in most distributions) a session is
    scheduled as one against the others: the process's own nice value
    weighs only within it, and the worker took an equal share of the CPU
    from gdb and its program (0.3 s of a first ``bt`` on two loaded cores).
    ``/proc/PID/autogroup`` (sched(7)) sets the group's; without autogroups
    there is no such file and the process's nice value is all there is.
    """
    try:
        with open(f"/proc/{pid}/autogroup", "w", encoding="ascii") as stream:
            stream.write(str(nice))
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    """The worker: make one symbol file, print the outcome as one JSON line."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m sframe_core.symfiles.jobs")
    parser.add_argument("path")
    parser.add_argument("--cache", default=None)
    parser.add_argument("--no-function-symbols", action="store_true")
    parser.add_argument("--before-entry", action="store_true")
    parser.add_argument("--nice", type=int, default=NICE,
                        help="lower this worker's priority by N: the debugger comes first")
    args = parser.parse_args(argv)
    if args.nice:
        _lower_priority(args.nice)
    from .symfile import default_jobs, symbol_file_for
    try:
        # A process of its own: a large module's functions go to every CPU.
        made = symbol_file_for(args.path, cache=args.cache, jobs=default_jobs(),
                               function_symbols=not args.no_function_symbols,
                               before_entry=args.before_entry)
    except SFrameError as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    except OSError as exc:
        print(json.dumps({"error": f"{args.path}: {exc.strerror or exc}"}))
        return 1
    print(json.dumps({"path": made.path, "warning": made.warning}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
