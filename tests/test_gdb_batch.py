"""gdb as pipelines and scripts run it, on a new build (an empty symbol-file
cache): ``gdb -batch -ex bt PROG CORE``, short sessions that exit before
their worker is done, two sessions at once, a worker killed half-way.

The program is lua5.4 -O2 -g (tests/fixtures/realprogs), sent to a worker as
a large module is (``SFRAME_FOREGROUND_FDES=300``; it has 705 FDEs), stopped
in ``luaT_callTMres``, whose caller ``luaV_finishget`` left by a tail call:
gdb's own unwinder shows that frame, the Python unwinder cannot. The twin
and the copy without ``.eh_frame`` lie at paths of one length
(``twin/lua5.4``, ``noeh/lua5.4``), so the two processes, and their cores,
have the same stack addresses. Every session starts with a cache of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import need
from helpers.gdbtools import GDBS, LOADED_LINE, PLUGIN, Gdb, clean_env, gdb_version, parse_bt

from sframe_core.symfiles.lock import LOCK_PREFIX, TMP_PREFIX, holder, tmp_prefix
from sframe_core.symfiles.symfile import maker_of

pytestmark = pytest.mark.gdb

LUA = Path(__file__).resolve().parent / "fixtures" / "realprogs" / "lua5.4"
STOP = "luaT_callTMres"
# lua5.4 to a worker, as a module above the made-at-once size goes.
WORKER = {"SFRAME_FOREGROUND_FDES": "300"}
# A worker without the C analysis (about 0.6 s of CPU for lua5.4 where the
# C takes 0.2 s): still at work when a test stops it, however loaded the machine.
SLOW_WORKER = {**WORKER, "SFRAME_NATIVE": "0"}
HANG_GUARD = 600.0  # seconds: a test that waits for a worker fails, not hangs


@pytest.fixture(scope="module")
def lua(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``twin/lua5.4``, ``noeh/lua5.4`` and a core of each stopped at ``STOP``
    (``twin.core``, ``noeh.core``), made by plain gdb."""
    root = tmp_path_factory.mktemp("batch")
    for which, name in (("twin", "lua5.4"), ("noeh", "lua5.4.noeh")):
        (root / which).mkdir()
        shutil.copy(need(LUA / "busid-v3" / name), root / which / "lua5.4")
        subprocess.run([GDBS["gdb13"], "-nx", "-batch", "-ex", f"break {STOP}",
                        "-ex", f"run -E {LUA / 'deep.lua'} > /dev/null",
                        "-ex", f"gcore {which}.core", "-ex", "kill", f"{which}/lua5.4"],
                       cwd=root, env=clean_env(), check=True, capture_output=True, timeout=300)
        assert (root / f"{which}.core").is_file()
    return root


@pytest.fixture(params=["gdb13", "gdb18"], scope="module")
def gdb13_18(request: pytest.FixtureRequest) -> str:
    path = GDBS[request.param]
    if gdb_version(path) is None:
        raise AssertionError(f"{request.param} not runnable at {path} (scripts/setup.sh installs it)")
    return path


def _env(cache: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return clean_env() | {"SFRAME_GDB_SYMBOL_FILES": "auto", "XDG_CACHE_HOME": str(cache)} \
        | (extra or {})


_NOISE = [(re.compile(r"\bLWP \d+"), "LWP N"), (re.compile(r"\bprocess \d+"), "process N")]


def _batch(gdb: str, root: Path, which: str, commands: list[str], *, core: bool = True,
           env: dict[str, str] | None = None) -> str:
    """What ``gdb -batch`` prints (both streams, in order): the plugin, as
    from a gdbinit, on ``noeh``; gdb alone on ``twin``."""
    argv = [gdb, "-nx", "-batch", "-iex", "set debuginfod enabled off", "-iex", "set width 0"]
    if which == "noeh":
        argv += ["-iex", f"source {PLUGIN}"]
    for command in commands:
        argv += ["-ex", command]
    argv.append(f"{which}/lua5.4")
    if core:
        argv.append(f"{which}.core")
    out = subprocess.run(argv, cwd=root, env=env or clean_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=HANG_GUARD).stdout
    assert "Traceback" not in out and "Python Exception" not in out and "Fatal signal" not in out, out
    text = out.replace(LOADED_LINE + "\n", "").replace("noeh/", "twin/").replace("noeh.", "twin.")
    for pattern, replacement in _NOISE:
        text = pattern.sub(replacement, text)
    return text


def _cache_entry(root: Path, cache: Path) -> str:
    """The cache entry gdb's session makes for ``noeh/lua5.4``."""
    entry, _ = maker_of(str(root / "noeh" / "lua5.4"), function_symbols=False,
                        cache=str(cache / "sframe-gdb" / "symbols"))
    return entry


def _wait_for_maker(entry: str) -> int:
    """The process id of the worker making ``entry``, once it holds its lock."""
    deadline = time.monotonic() + HANG_GUARD
    while (pid := holder(entry)) in (None, 0):
        assert not os.path.exists(entry), "the worker was done before the test could see it"
        assert time.monotonic() < deadline, "no worker took the lock"
        time.sleep(0.02)
    assert pid is not None
    return pid


def _wait_for_workers(program: Path, entry: str) -> None:
    """Until no worker for ``program`` runs nor holds the lock of ``entry``."""
    deadline = time.monotonic() + HANG_GUARD
    while _workers(program) or holder(entry) is not None:
        assert time.monotonic() < deadline, "the worker never finished"
        time.sleep(0.05)


def _workers(program: Path) -> set[int]:
    """The sessions (one per worker: each starts its own) of the symbol-file
    workers for ``program`` running now (a worker's parts share its session)."""
    needle = f"sframe_core.symfiles.jobs\0{os.path.realpath(program)}".encode()
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as stream:
                if needle in stream.read():
                    found.add(os.getsid(int(pid)))
        except OSError:
            continue
    return found


def _leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith((TMP_PREFIX, LOCK_PREFIX))]


@contextmanager
def _stopped(pid: int) -> Iterator[None]:
    """The worker ``pid`` (and its parts: its process group) stopped meanwhile."""
    os.killpg(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        try:
            os.killpg(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_batch_bt_of_a_core_on_a_new_build_is_the_twins(gdb_path: str, lua: Path,
                                                        tmp_path: Path) -> None:
    """``gdb -batch -ex bt PROG CORE``, the plugin in a gdbinit, an empty
    cache: every line the twin's, the core's first frame (with its entry
    values) and the tail-call frame included; the Python unwinder alone
    (``symbol-files off``) gets this core wrong, so the file was waited for."""
    commands = ["bt", "frame 1", "info frame"]
    twin = _batch(gdb_path, lua, "twin", commands)
    assert "tail call frame" in twin and f"in {STOP} (" not in twin.split("#1")[0], twin
    ours = _batch(gdb_path, lua, "noeh", commands, env=_env(tmp_path / "cache", WORKER))
    assert ours == twin
    alone = _batch(gdb_path, lua, "noeh", ["bt"],
                   env=_env(tmp_path / "off", {"SFRAME_GDB_SYMBOL_FILES": "off"}))
    assert len(parse_bt(alone)) < len(parse_bt(twin)), alone
    assert os.path.isfile(_cache_entry(lua, tmp_path / "cache"))


def test_batch_first_stop_on_a_new_build_is_the_twins(gdb13_18: str, lua: Path,
                                                      tmp_path: Path) -> None:
    """``gdb -batch`` with ``break``, ``run`` and ``bt`` on a new build: the
    stop's line and the backtrace are the twin's (the same environment for
    both: the program's stack addresses depend on it)."""
    commands = [f"break {STOP}", f"run -E {LUA / 'deep.lua'} > /dev/null", "bt"]
    env = _env(tmp_path / "cache", WORKER)
    twin = _batch(gdb13_18, lua, "twin", commands, core=False, env=env)
    assert f"Breakpoint 1, {STOP} (L=L@entry=" in twin, twin
    assert _batch(gdb13_18, lua, "noeh", commands, core=False, env=env) == twin


def test_worker_outlives_a_short_session_and_serves_the_next(gdb13_18: str, lua: Path,
                                                             tmp_path: Path) -> None:
    """A session that exits before its worker is done (a script's gdb,
    commands from stdin that ends at once): the worker finishes the file
    into the cache, whole, and the next session (a core's ``bt`` in batch
    mode) finds it there, starts no worker, and is the twin's."""
    cache = tmp_path / "cache"
    env = _env(cache, SLOW_WORKER)
    entry = _cache_entry(lua, cache)
    short = subprocess.run([gdb13_18, "-nx", "-q", "-iex", f"source {PLUGIN}", "-ex", "info sframe",
                            str(lua / "noeh" / "lua5.4")], stdin=subprocess.DEVNULL, env=env,
                           capture_output=True, text=True, timeout=HANG_GUARD)
    assert "until its symbol file is ready (being made for" in short.stdout, short.stdout
    assert "tail-call frames and entry values (x@entry) are gdb's own only once it is ready" \
        in short.stdout, short.stdout
    assert not os.path.exists(entry)  # gdb has exited, its worker has not
    _wait_for_workers(lua / "noeh" / "lua5.4", entry)
    assert os.path.isfile(entry)
    assert _leftovers(Path(entry).parent) == []
    ours = _batch(gdb13_18, lua, "noeh", ["bt", "info sframe"], env=env)
    assert not _workers(lua / "noeh" / "lua5.4")
    ours, info = ours.split("sframe unwinder (sframe-gdb")
    assert f"unwound by gdb's DWARF unwinder from the symbol file {entry}" in info, info
    assert ours == _batch(gdb13_18, lua, "twin", ["bt"])


def test_two_sessions_on_a_new_build_start_one_worker(gdb13_18: str, lua: Path,
                                                      tmp_path: Path) -> None:
    """Two sessions at once on a new build: the second finds the first's
    worker at work (stopped here, so that it is) and follows it, says so in
    ``info sframe``, and starts none of its own; both get its file."""
    cache = tmp_path / "cache"
    env = SLOW_WORKER | {"XDG_CACHE_HOME": str(cache)}
    program = lua / "noeh" / "lua5.4"
    entry = _cache_entry(lua, cache)
    with Gdb(gdb13_18, symbol_files="auto", env=env, args=[str(program)]) as first:
        pid = _wait_for_maker(entry)
        with _stopped(pid):
            with Gdb(gdb13_18, symbol_files="auto", env=env, args=[str(program)]) as second:
                info = second.cmd("info sframe")
                assert f"being made by another session's worker (process {pid}) for" in info, info
                assert _workers(program) == {os.getsid(pid)}
                os.killpg(pid, signal.SIGCONT)
                for session in (first, second):
                    deadline = time.monotonic() + HANG_GUARD
                    while "unwound by gdb's DWARF unwinder" not in (info := session.cmd("info sframe")):
                        assert "no symbol file" not in info, info
                        assert time.monotonic() < deadline, info
                        time.sleep(0.1)
                    assert f"from the symbol file {entry}" in info, info
    assert _leftovers(Path(entry).parent) == []


def test_killed_worker_leaves_no_half_written_file(lua: Path, tmp_path: Path) -> None:
    """A worker killed half-way (and a temporary file as one killed while
    writing leaves it, and its lock file): no file in the cache under the
    entry's name; the next session takes the lock, removes what was left,
    makes the file, and its core's ``bt`` is the twin's."""
    gdb = GDBS["gdb13"]
    cache = tmp_path / "cache"
    env = SLOW_WORKER | {"XDG_CACHE_HOME": str(cache)}
    program = lua / "noeh" / "lua5.4"
    entry = _cache_entry(lua, cache)
    directory = Path(entry).parent
    half = directory / f"{tmp_prefix(entry)}killed.debug"
    with Gdb(gdb, symbol_files="auto", env=env, args=[str(program)]) as first:
        pid = _wait_for_maker(entry)
        half.write_bytes(b"\x7fELF" + bytes(100))  # what a write cut short leaves
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + HANG_GUARD
        while "until its symbol file is ready" in (info := first.cmd("info sframe")):
            assert time.monotonic() < deadline, info
            time.sleep(0.1)
        assert "no symbol file (symbol file worker failed" in info, info
    assert not os.path.exists(entry)
    assert any(name.startswith(LOCK_PREFIX) for name in _leftovers(directory))  # no lock: a name
    ours = _batch(gdb, lua, "noeh", ["bt"], env=_env(cache, WORKER))
    assert ours == _batch(gdb, lua, "twin", ["bt"])
    assert os.path.isfile(entry) and _leftovers(directory) == []


def test_session_that_quits_from_its_command_line_after_its_worker(gdb13_18: str, lua: Path,
                                                                   tmp_path: Path) -> None:
    """``gdb -ex ... -ex quit`` (no batch): the worker is done before the
    commands end; its file is attached at ``info sframe`` and gdb quits
    cleanly (gdb 13 crashed as it exited with an event posted by the
    worker's thread that it never ran: none is posted before the first prompt)."""
    wait = ("python import gdb; [job.wait() for job in "
            "list(gdb._sframe_gdb_plugin.routes._jobs.values())]")  # the worker, done
    run = subprocess.run([gdb13_18, "-nx", "-q", "-iex", f"source {PLUGIN}", "-ex", wait,
                          "-ex", "info sframe", "-ex", "quit", str(lua / "noeh" / "lua5.4")],
                         stdin=subprocess.DEVNULL, env=_env(tmp_path / "cache", WORKER),
                         capture_output=True, text=True, timeout=HANG_GUARD)
    assert run.returncode == 0 and "Fatal signal" not in run.stderr, run.stderr
    entry = _cache_entry(lua, tmp_path / "cache")
    assert f"unwound by gdb's DWARF unwinder from the symbol file {entry}" in run.stdout, run.stdout
