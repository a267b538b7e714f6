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
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from ..base import settings
from ..base.errors import SFrameError
from ..format import saved_registers

if TYPE_CHECKING:
    import subprocess

    from ..format.section import SFrameSection
    from .symfile import ModuleInfo, SymbolFile

# argparse, json, shutil, subprocess and threading are imported where a worker
# is started or run: a debugger imports this module at start-up for
# ``made_at_once`` and the threshold, and most sessions start no worker
# (a warm cache, a small module), so they would cost every start-up ~15 ms.

__all__ = ["JobResult", "Job", "worker_python", "main", "FOREGROUND_FDES",
           "FOREGROUND_FDES_NATIVE", "FOREGROUND_ENV",
           "STOP_WAIT_SECONDS", "STOP_WAIT_ENV", "stop_wait", "made_at_once", "symbol_file_now"]

# Below this many FDEs a missing symbol file is made before the debugger goes
# on (a fraction of a second); above it, in a worker while the adapter's own
# unwinder (gdb: the Python unwinder; LLDB 22+: the frame provider) serves.
FOREGROUND_FDES = 300
# The same where the C makes the FDEs (``native_fdes``: 10-70 us each, where
# the Python analysis took 0.3 ms): 2,048 FDEs in at most about 0.15 s
# (lua5.4's 705 in 0.05 s, 1,030 generated ones in 0.02 s).
FOREGROUND_FDES_NATIVE = 2048
# The threshold a session starts with, if set (tests send a small program to
# the worker with it, rather than building a large one).
FOREGROUND_ENV = "SFRAME_FOREGROUND_FDES"
# How much lower than the debugger a worker runs (``--nice``).
NICE = 10
# A worker's progress line: ``progress DONE OF`` (FDEs), before its JSON line.
PROGRESS = "progress"
# What a worker's symbol file costs (``Job.remaining``, until the worker
# reports its progress): its start-up (Python and imports, until its
# ``progress 0``) and the seconds of one CPU per byte of code with the
# saved-register analysis, as measured on real code (docs/dwarf.md, "Cost").
WORKER_START_SECONDS = 0.1
SECONDS_PER_CODE_BYTE = 6.5e-6
# The same with the amd64 FDEs made in C (``sframe_core.analysis.native``,
# ``native_fdes``); a little more per byte than measured, since a worker
# expected too soon is waited for in vain.
SECONDS_PER_CODE_BYTE_NATIVE = 0.6e-6
# A worker expected to be done within this long is waited for at a stop
# (``Job.result_at_stop``: once per worker, for at most twice as long): its
# file then serves the stop's ``bt`` with the debugger's own frames, as on
# the twin (tail-call frames, callers' variables), where the adapter's own
# unwinder would serve it otherwise; never longer than half the time the
# debugger has run (``stop_wait``). The variable sets another bound,
# absolute (0: never wait; tests set a large one to always wait).
STOP_WAIT_SECONDS = 0.5
STOP_WAIT_ENV = "SFRAME_STOP_WAIT_SECONDS"
# How often a debugger that follows another process's worker (``Job``)
# looks whether it is done.
FOLLOW_SECONDS = 0.05


def made_at_once(path: str) -> bool:
    """Is the module at ``path`` small enough to make its symbol file now?

    Also True where a worker would gain nothing: the module cannot be read
    (the generation then says what is wrong, at once), or the saved-register
    analysis is off (the file then costs little).
    """
    from .native_fdes import serves
    if not saved_registers():
        return True
    found = _section(path)
    if found is None:
        return True
    limit = FOREGROUND_FDES_NATIVE if serves(found) else FOREGROUND_FDES
    given = settings.number(FOREGROUND_ENV)
    return found.num_fdes <= (limit if given is None else int(given))


def stop_wait() -> float:
    """How long a stop may wait for a nearly done worker: ``STOP_WAIT_ENV``
    when set, else ``STOP_WAIT_SECONDS`` but never longer than half the time
    this process (the debugger) has run, so that waiting (at most twice
    that, ``result_at_stop``) and then reading the file at most about double
    the time to a first stop. gdb reaches a small program's in 0.2 s, where a
    worker 0.4 s from done made the first ``bt`` 3.5 times as slow as gdb
    alone; with the whole age as the bound, gdb on 10,000 generated
    functions waited 0.3 s at its stop and read the file: 2.2 times gdb on
    the twin, where the Python unwinder serves that stop in 1.2 times."""
    given = settings.number(STOP_WAIT_ENV)
    if given is not None:
        return given
    return min(STOP_WAIT_SECONDS, _process_seconds() / 2)


_IMPORTED = time.monotonic()


def _process_seconds() -> float:
    """Seconds since this process started (``/proc/self/stat``), else since
    this module was imported."""
    try:
        with open("/proc/self/stat", "rb") as stream:
            fields = stream.read().rpartition(b")")[2].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime, field 22
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic() - _IMPORTED


def _expected_seconds(path: str) -> float:
    """How long a worker takes to make ``path``'s symbol file, from the size
    of its code and the split between processes (an estimate, not a bound)."""
    from ..format.elf import read_elf
    from .workers import default_jobs, split_min
    try:
        elf = read_elf(path)
        found = elf.open()
    except SFrameError:
        return WORKER_START_SECONDS
    if found is None:
        return WORKER_START_SECONDS
    code = sum(seg.filesz for seg in elf.segments if seg.executable)
    workers = default_jobs() if found.num_fdes >= split_min(found) else 1
    return WORKER_START_SECONDS + code * _per_code_byte(found.arch.name) / max(1, workers)


def _per_code_byte(abi: str) -> float:
    """A worker's seconds of one CPU per byte of code: less where the C analysis serves."""
    from ..analysis import native

    return SECONDS_PER_CODE_BYTE_NATIVE if abi == "amd64" and native.built() \
        else SECONDS_PER_CODE_BYTE


def _section(path: str) -> SFrameSection | None:
    """The module's ``.sframe`` (its header alone read), or None: no such
    section, or a module that cannot be read (its generation says why)."""
    from ..format.elf import read_elf
    try:
        return read_elf(path).open()
    except SFrameError:
        return None


def _splits(path: str) -> bool:
    """Is the module's symbol file worth splitting between processes (``workers.split_min``)?"""
    from .workers import split_min

    found = _section(path)
    return found is not None and found.num_fdes >= split_min(found)


def symbol_file_now(path: str, *, function_symbols: bool = True, before_entry: bool = False,
                    module: ModuleInfo | None = None, numbered_names: bool = False) -> SymbolFile:
    """``symfile.symbol_file_for``, for an adapter that waits for the file
    (the debugger cannot go on without it): a module large enough to be
    split between processes (``workers.split_min``) is made by a worker at
    the debugger's own priority, on every CPU, since a debugger's Python
    cannot fork itself; the rest here, as before. A worker that fails or
    cannot start leaves the module to ``symbol_file_for`` here, which makes
    it or raises what is wrong with it (one line, as always)."""
    from .symfile import cached_symbol_file, symbol_file_for
    from .workers import default_jobs

    if saved_registers() and default_jobs() > 1 and _splits(path):
        result = Job(path, lambda result: None, function_symbols=function_symbols,
                     before_entry=before_entry, nice=0, numbered_names=numbered_names).wait()
        if result.path is not None:
            made = cached_symbol_file(path, function_symbols=function_symbols,
                                      before_entry=before_entry, module=module,
                                      numbered_names=numbered_names)
            if made is not None:
                return made._replace(warning=result.warning or made.warning)
    return symbol_file_for(path, function_symbols=function_symbols, before_entry=before_entry,
                           module=module, numbered_names=numbered_names)


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
                 before_entry: bool = False, nice: int = NICE,
                 module: ModuleInfo | None = None, numbered_names: bool = False) -> None:
        import threading

        from .symfile import maker_of

        self.path = path
        self.result: JobResult | None = None
        self.started = time.monotonic()
        self._expected: float | None = None
        self._progress: tuple[int, int, float] | None = None  # done, of, when
        self._begun: float | None = None  # when the worker began the FDEs (``progress 0``)
        self._waited_at_stop = False
        self._cancelled = False
        self._claimed = False
        self._claim_lock = threading.Lock()
        self._on_done = on_done
        self._process: subprocess.Popen[bytes] | None = None
        self._options = (cache, function_symbols, before_entry, nice, numbered_names)
        # Another process making this file (another session's worker, which
        # outlives its session): followed, never a second worker
        # (``lock``); its process id, 0 if it has not written it yet.
        self.elsewhere: int | None = None
        self._entry: str | None = None
        try:
            self._entry, self.elsewhere = maker_of(
                path, cache=cache, function_symbols=function_symbols, before_entry=before_entry,
                module=module, numbered_names=numbered_names)
        except SFrameError:
            pass  # the worker says what is wrong with the module, as always
        if self.elsewhere is not None and self._entry is not None:
            self.started = _lock_since(self._entry)
            run = self._follow
        elif self._spawn():
            run = self._wait
        else:
            return
        self._thread = threading.Thread(target=run, daemon=True,
                                        name=f"sframe symbol file {os.path.basename(path)}")
        self._thread.start()

    def _spawn(self) -> bool:
        """Start the worker process; False (and the result said) if it cannot start."""
        import subprocess

        cache, function_symbols, before_entry, nice, numbered_names = self._options
        python = worker_python()
        if python is None:
            self._finish(JobResult(None, "no Python interpreter found to make the symbol file in"))
            return False
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(_import_roots())
        env.pop("PYTHONHOME", None)
        args = [python, "-m", "sframe_core.symfiles.jobs", self.path]
        if cache:
            args += ["--cache", cache]
        if not function_symbols:
            args.append("--no-function-symbols")
        if before_entry:
            args.append("--before-entry")
        if numbered_names:
            args.append("--numbered-names")
        args += ["--nice", str(nice)]
        try:
            # A session of its own: the terminal's Ctrl-C and hangup are the
            # debugger's, and the worker outlives the debugger (its file is
            # the next session's).
            self._process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, start_new_session=True)
        except OSError as exc:
            self._finish(JobResult(None, f"cannot start {python}: {exc.strerror or exc}"))
            return False
        # At once, not only once the worker has started Python and imported
        # what it needs (0.2 s of CPU): the debugger comes first from the start.
        if nice:
            _nice_session(self._process.pid, nice)
        return True

    def _follow(self) -> None:
        """Wait for another process's worker to let its lock go: its file,
        or (it died before the file was whole) a worker of this one's."""
        from . import lock
        from .symfile import cached_symbol_file

        assert self._entry is not None
        while lock.holder(self._entry) is not None:
            if self._cancelled:
                return
            time.sleep(FOLLOW_SECONDS)
        if self._cancelled:
            return
        cache, function_symbols, before_entry, _, numbered_names = self._options
        try:
            made = cached_symbol_file(self.path, cache=cache, function_symbols=function_symbols,
                                      before_entry=before_entry, numbered_names=numbered_names)
        except SFrameError:
            made = None
        if made is not None:
            self._finish(JobResult(made.path, None, made.warning))
            return
        self.elsewhere = None
        self.started, self._begun, self._expected = time.monotonic(), None, None
        if self._spawn():
            self._wait()

    def wait(self) -> JobResult:
        """The result, once the worker is done (for a caller that cannot go on without it)."""
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.join()
        assert self.result is not None
        return self.result

    def remaining(self) -> float:
        """Seconds until the worker is expected to be done (0 once it is) if
        the debugger waits for it now: from its progress at the pace so far,
        or before it reports any, from the size of the module's code.

        Asked at a stop, where the debugger and its program leave the CPUs
        to the worker: a pace measured while they ran (a launch keeps both
        CPUs of the test machine busy, and the worker runs at ``NICE``) says
        little of the pace from now on, so the rest of the work at the pace
        the size of the code predicts for a worker alone bounds it too
        (lua5.4 on LLDB 22: 128 of 705 FDEs done during the launch put the
        rest at 0.73 s, which the worker then took 0.3 s for)."""
        if self.result is not None:
            return 0.0
        now = time.monotonic()
        progress = self._progress
        begun = self.started if self._begun is None else self._begun
        if self._expected is None:
            self._expected = _expected_seconds(self.path)
        if progress is not None:
            # The pace since the FDEs began, not since the start-up
            # (lua5.4's first report, 128 of 705 FDEs, comes 0.25 s after
            # the worker starts, 0.09 s of it start-up).
            done, of, when = progress
            paced = (when - begun) * (of - done) / done - (now - when)
            alone = (self._expected - WORKER_START_SECONDS) * (of - done) / of
            return max(0.0, min(paced, alone))
        if self._begun is not None:
            return max(0.0, begun + self._expected - WORKER_START_SECONDS - now)
        return max(0.0, self.started + self._expected - now)

    def running(self) -> bool:
        """Is the result still to come (a worker, or the one followed, at work)?"""
        thread = getattr(self, "_thread", None)
        return self.result is None and thread is not None and thread.is_alive()

    def result_within(self, seconds: float) -> JobResult | None:
        """The result if the worker is done within ``seconds``; None: not yet."""
        thread = getattr(self, "_thread", None)
        if thread is not None and seconds > 0:
            thread.join(seconds)
        return self.result

    def result_at_stop(self) -> JobResult | None:
        """The result, waited for if the worker is expected to be done within
        ``stop_wait()`` (once: a worker slower than expected is not waited
        for at every stop); None: the adapter's own unwinder serves.

        Once it waits, it waits up to twice that bound, whatever the
        estimate said: on a loaded machine a worker at ``NICE`` takes longer
        than its pace so far says, and a wait cut at twice the estimate left
        some first stops to the adapter's own unwinder (without gdb's
        tail-call frames) for the sake of a few tenths of a second; the
        bound keeps a first stop within about twice the time gdb took to
        reach it (``stop_wait``)."""
        if self.result is None and not self._waited_at_stop:
            wait = stop_wait()
            if wait > 0 and self.remaining() <= wait:
                self._waited_at_stop = True
                return self.result_within(2 * wait)
        return self.result

    def cancel(self) -> None:
        """Stop the worker (the cache keeps nothing half-written), or stop
        following another process's (which goes on)."""
        self._cancelled = True
        process = self._process
        if process is not None and process.poll() is None:
            try:
                process.kill()
            except OSError:
                pass

    def _wait(self) -> None:
        import json
        import threading

        process = self._process
        assert process is not None and process.stdout is not None and process.stderr is not None
        errors: list[bytes] = []
        stderr = process.stderr
        reader = threading.Thread(target=lambda: errors.append(stderr.read()), daemon=True)
        reader.start()  # a full stderr pipe would block the worker, and this thread with it
        last = b""
        for line in process.stdout:
            report = _progress_report(line)
            if report is not None and report[0] == 0:
                self._begun = time.monotonic()
            elif report is not None:
                self._progress = (*report, time.monotonic())
            elif line.strip():
                last = line
        process.wait()
        reader.join()
        try:
            answer = json.loads(last.decode("utf-8", "replace"))
            result = JobResult(answer.get("path"), answer.get("error"), answer.get("warning"))
        except (ValueError, AttributeError):
            lines = b"".join(errors).decode("utf-8", "replace").strip().splitlines()
            result = JobResult(None, f"symbol file worker failed (exit {process.returncode})"
                               + (f": {lines[-1]}" if lines else ""))
        self._finish(result)

    def claim(self) -> None:
        """The caller waits for the result itself (``result_within``):
        ``on_done`` is not called once it has said so. gdb 13 crashes at
        exit on a ``gdb.post_event`` it never ran, and a batch session may
        exit before it runs one."""
        with self._claim_lock:
            self._claimed = True

    def _finish(self, result: JobResult) -> None:
        with self._claim_lock:
            self.result = result
            claimed = self._claimed
        if not claimed:
            self._on_done(result)


def _lock_since(entry: str) -> float:
    """When the maker of cache entry ``entry`` took its lock, on this
    process's ``time.monotonic`` clock (now if that cannot be read)."""
    from .lock import lock_path

    try:
        age = time.time() - os.stat(lock_path(entry)).st_mtime
    except OSError:
        age = 0.0
    return time.monotonic() - max(0.0, age)


def _progress_report(line: bytes) -> tuple[int, int] | None:
    """(done, of) from a worker's progress line (``PROGRESS``; done 0: the
    FDEs' work begins), else None."""
    words = line.split()
    if len(words) == 3 and words[0] == PROGRESS.encode() and words[1].isdigit() \
            and words[2].isdigit() and 0 <= int(words[1]) < int(words[2]):
        return int(words[1]), int(words[2])
    return None


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


def _few_collections() -> None:
    """A worker makes hundreds of thousands of small tuples (rows, rules,
    spans) that live until its file is written and hold no cycles: the
    cyclic collector, run every 700 allocations, found nothing and took 6%
    of a 10,000-function file. It runs rarely here (a worker lives for one
    file; its parts are forked from it and inherit this)."""
    import gc

    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def main(argv: list[str] | None = None) -> int:
    """The worker: make one symbol file, print the outcome as one JSON line
    (after a ``PROGRESS`` line now and then: the debugger may wait for it)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m sframe_core.symfiles.jobs")
    parser.add_argument("path")
    parser.add_argument("--cache", default=None)
    parser.add_argument("--no-function-symbols", action="store_true")
    parser.add_argument("--before-entry", action="store_true")
    parser.add_argument("--numbered-names", action="store_true")
    parser.add_argument("--nice", type=int, default=NICE,
                        help="lower this worker's priority by N: the debugger comes first")
    args = parser.parse_args(argv)
    _outlive_the_debugger()
    if args.nice:
        _lower_priority(args.nice)
    _few_collections()
    from .symfile import symbol_file_for
    from .workers import default_jobs
    try:
        # A process of its own: a large module's functions go to every CPU.
        made = symbol_file_for(args.path, cache=args.cache, jobs=default_jobs(),
                               function_symbols=not args.no_function_symbols,
                               before_entry=args.before_entry,
                               numbered_names=args.numbered_names,
                               progress=lambda done, of: _say(f"{PROGRESS} {done} {of}"))
    except SFrameError as exc:
        _say(json.dumps({"error": str(exc)}))
        return 1
    except OSError as exc:
        _say(json.dumps({"error": f"{args.path}: {exc.strerror or exc}"}))
        return 1
    _say(json.dumps({"path": made.path, "warning": made.warning}))
    return 0


def _outlive_the_debugger() -> None:
    """A debugger that exits (``gdb -batch``, a script's session) must not
    take its worker with it: the file is the next session's. The worker is
    in a session of its own (no terminal's hangup reaches it); a hangup sent
    to it otherwise is ignored too, and its pipes to the debugger closing is
    ``_say``'s."""
    import signal

    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    except (OSError, ValueError):
        pass


def _say(line: str) -> None:
    """One line to the debugger; once it has gone (its end of the pipe
    closed: it exited before the file was made), the worker goes on with
    its output to /dev/null."""
    try:
        print(line, flush=True)
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.dup2(devnull, sys.stderr.fileno())
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
