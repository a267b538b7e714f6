"""Whole gdb sessions on a ``.noeh`` binary with the plugin, against the same
session on its ``.eh_frame`` twin, compared exactly (every line gdb prints).

The plugin hands each SFrame objfile's rules to gdb's own DWARF unwinder as
a symbol file (``gdb_plugin/symfiles.py``), so everything that needs gdb's
own unwinder is the twin's: tail-call frames, entry values, ``info frame``'s
saved registers, inferior calls through ``<function called from gdb>``,
``finish`` and ``return``, MI (an IDE's gdb), fork and exec with several
inferiors, record and reverse execution.

The program is built -O2 -g by the host's gcc and gas (``--gsframe``); the
twin and the copy without ``.eh_frame`` lie at paths of the same length
(``twin/sessions``, ``noeh/sessions``), so that the two processes get the
same stack addresses and only that path differs in what gdb prints.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers import need, without_eh_frame
from helpers.gdbtools import PLUGIN, Gdb, clean_env, parse_bt
from helpers.host_programs import FLAGS, SRC

pytestmark = pytest.mark.gdb

LUA = Path(__file__).resolve().parent / "fixtures" / "realprogs" / "lua5.4" / "busid-v3"


def _pair(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A directory with ``twin/NAME`` and ``noeh/NAME``, from ``tests/fixtures/src/NAME.c``."""
    for tool in ("gcc", "objcopy"):
        if shutil.which(tool) is None:
            raise AssertionError(f"{tool} is needed (scripts/setup.sh installs it)")
    root = tmp_path_factory.mktemp(name)
    (root / "twin").mkdir()
    (root / "noeh").mkdir()
    flags = [f for f in FLAGS if f != "-g0"] + ["-g"]
    subprocess.run(["gcc", *flags, "-I", str(SRC), "-o", str(root / "twin" / name),
                    str(SRC / f"{name}.c")], check=True)
    without_eh_frame(root / "twin" / name, root / "noeh" / name, debug_frame=True)
    return root


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with ``twin/sessions`` and ``noeh/sessions``."""
    return _pair(tmp_path_factory, "sessions")


# What differs between any two runs of a program, with or without the plugin.
_RUN_NOISE = [(re.compile(r"\b(process|LWP) \d+"), r"\1 N"),
              (re.compile(r'pid="\d+"'), 'pid="N"'), (re.compile(r"\bpid = \d+"), "pid = N"),
              (re.compile(r'core="\d+"'), 'core="N"'),  # the CPU a thread last ran on
              (re.compile(r"(?<=\S) {2,}"), " "),  # table columns padded to a PID's width
              # When gdb reads a library's separate debug file (libc, ld.so)
              # depends on which objfile was looked at first: it says so, once.
              (re.compile(r"^Reading symbols from /usr/lib/debug/\S+\n", re.M), "")]


def _normal(text: str, program: str = "sessions") -> str:
    text = text.replace(f"noeh/{program}", f"twin/{program}")
    for pattern, replacement in _RUN_NOISE:
        text = pattern.sub(replacement, text)
    return text


def _no_python_errors(text: str) -> None:
    assert "Python Exception" not in text and "Traceback" not in text, text


def _session(gdb_path: str, root: Path, which: str, commands: list[str],
             args: str = "", program: str = "sessions",
             env: dict[str, str] | None = None, prologue: bool = False) -> list[str]:
    """Each command's output, with the program's directory written as ``twin``
    (``root/twin/PROGRAM`` and ``root/noeh/PROGRAM``: paths of one length, so
    the stack is the same). ``prologue``: gdb's amd64 prologue analyzer on,
    as users have it."""
    plugin = which == "noeh"
    with Gdb(gdb_path, plugin=plugin, cwd=str(root), args=[f"{which}/{program}"], env=env,
             disable_prologue=not prologue) as g:
        if args:
            g.cmd(f"set args {args}")
        outs = []
        for command in commands:
            out = g.cmd(command)
            _no_python_errors(out)
            outs.append(_normal(out, program))
        return outs


def _same(commands: list[str], twin: list[str], ours: list[str]) -> None:
    """Every command printed the same on the twin and with the plugin."""
    for command, want, got in zip(commands, twin, ours, strict=True):
        assert got == want, f"{command!r}\n--- twin:\n{want}\n--- plugin:\n{got}"


def _same_session(gdb_path: str, root: Path, commands: list[str], args: str = "") -> list[str]:
    """Run ``commands`` on the twin and on the .noeh copy with the plugin:
    every command prints the same, and without the plugin the .noeh copy
    does not (the scenario needs the plugin)."""
    twin = _session(gdb_path, root, "twin", commands, args)
    _same(commands, twin, _session(gdb_path, root, "noeh", commands, args))
    return twin


def test_frames_tail_calls_entry_values_info_frame(gdb_path: str, sessions: Path) -> None:
    out = _same_session(gdb_path, sessions, [
        "break inner", "run", "bt", "bt full", "info frame", "up", "info frame", "info locals",
        "p a", "p a@entry", "frame 2", "info frame", "info registers rbx rbp rsp rip",
        "down", "down", "finish"])
    frames = parse_bt(out[2])
    # middle tail-calls inner: gdb's tail-call frame, made from DW_TAG_call_site.
    assert [f.name for f in frames] == ["inner", "middle", "outer", "main"], out[2]
    assert "Saved registers:" in out[11] and "rip at 0x" in out[11], out[11]
    assert "tail call frame" in out[6], out[6]
    assert "Run till exit from #0" in out[-1], out[-1]
    # gdb alone on the copy without .eh_frame gets this session wrong.
    without = _session_without_plugin(gdb_path, sessions, ["break inner", "run", "bt"])
    assert parse_bt(without[2]) != frames, without[2]


def _session_without_plugin(gdb_path: str, root: Path, commands: list[str]) -> list[str]:
    with Gdb(gdb_path, plugin=False, cwd=str(root), args=["noeh/sessions"]) as g:
        return [g.cmd(c) for c in commands]


def test_annotations(gdb_path: str, sessions: Path) -> None:
    """``set annotate 2`` (what gdb.cp/annota2.exp drives): every annotation
    as on the twin. gdb 16 and later print a stop's annotation a second
    time while any Python stop listener is connected; the plugin leaves
    the stop to the prompt while annotations are on."""
    commands = ["set annotate 2", "break inner", "run", "bt", "finish", "next"]
    twin = _session(gdb_path, sessions, "twin", commands)
    assert twin[2].count("\x1a\x1abreakpoint 1\n") == 1, twin[2]
    _same(commands, twin, _session(gdb_path, sessions, "noeh", commands))


def test_inferior_call_stopping_inside(gdb_path: str, sessions: Path) -> None:
    out = _same_session(gdb_path, sessions, [
        "break inner", "run", "break hook", "call called(3)", "bt", "up 2", "info frame",
        "finish", "bt", "print called(5)", "bt 3", "return", "bt 2"])
    assert "<function called from gdb>" in out[4], out[4]
    assert "The program being debugged stopped while in a function called from GDB" in out[3]


def test_return_and_until(gdb_path: str, sessions: Path) -> None:
    _same_session(gdb_path, sessions, [
        "break rec if n == 2", "run", "bt", "tbreak stop_here", "continue", "bt", "up 3",
        "return", "bt", "next", "next", "bt", "finish"], args="rec 6")


def test_fork_exec_two_inferiors(gdb_path: str, sessions: Path) -> None:
    """The exec'd child and the parent, both mapped at the same addresses: each
    inferior's frames are its own (no state shared between program spaces)."""
    out = _same_session(gdb_path, sessions, [
        "set detach-on-fork off", "set follow-fork-mode child", "break child_chain",
        "run", "bt", "info inferiors", "inferior 1", "bt", "up", "info frame", "inferior 2",
        "bt", "finish"], args="fork")
    assert [f.name for f in parse_bt(out[4])] == ["child_chain", "main"], out[4]
    assert "main" in [f.name for f in parse_bt(out[7])], out[7]


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with ``twin/forks`` and ``noeh/forks`` (a PIE that forks, and execs)."""
    return _pair(tmp_path_factory, "forks")


# Whole sessions across fork and exec, as users type them: breakpoints in a
# child (its copy of the PIE relocated by gdb), set before or after `run`,
# following the parent or the child, detached or not, and an exec caught.
FORK_SESSIONS = {
    "after-run-parent-detach-off": (
        "", ["break main", "run", "set detach-on-fork off", "break marker", "continue", "bt",
             "info breakpoints", "info inferiors", "inferior 2", "continue", "bt", "up 2",
             "info frame"]),
    "before-run-parent-detach-off": (
        "", ["set detach-on-fork off", "break marker", "run", "bt", "inferior 2", "continue",
             "bt", "info breakpoints"]),
    "before-run-child": (
        "", ["set follow-fork-mode child", "break scoped", "run", "bt", "info breakpoints",
             "finish", "inferior 1", "info unwinder", "info breakpoints", "inferior 2",
             "info unwinder", "bt"]),
    "after-run-child-detach-off": (
        "", ["break chain", "run", "set follow-fork-mode child", "set detach-on-fork off",
             "break marker", "continue", "bt", "info inferiors", "inferior 1", "bt 2"]),
    "exec-child-detach-off": (
        "exec", ["set follow-fork-mode child", "set detach-on-fork off", "catch exec",
                 "break scoped", "run", "bt", "continue", "bt", "info breakpoints",
                 "info inferiors"]),
}


@pytest.mark.parametrize("scenario", sorted(FORK_SESSIONS))
def test_fork_sessions(gdb_path: str, forks: Path, scenario: str) -> None:
    """Every line of the session is the twin's (gdb 13 to 16 once left the
    child's PIE unrelocated: "Cannot insert breakpoint 1. Cannot access
    memory at address 0x1090"), gdb's prologue analyzer on as users have it
    (the exec catchpoint's backtrace in ld.so's ``_start`` is what gdb reads
    off the stack, on the twin and with the plugin)."""
    args, commands = FORK_SESSIONS[scenario]
    twin, ours = (_session(gdb_path, forks, which, commands, args, program="forks",
                           prologue=True) for which in ("twin", "noeh"))
    _same(commands, twin, ours)
    text = "\n".join(twin)
    assert "Cannot insert breakpoint" not in text and "Cannot access memory" not in text, text
    bts = [parse_bt(out) for command, out in zip(commands, twin, strict=True)
           if command == "bt"]
    # tail_call's frame is gdb's tail-call frame: gdb's own unwinder served.
    assert any([f.name for f in bt][:4] == ["marker", "scoped", "tail_call", "chain"]
               or [f.name for f in bt][:3] == ["scoped", "tail_call", "chain"]
               for bt in bts), text


# A Python unwinder of the user's own, as gdb.python/py-unwind-maint.exp registers.
_USER_UNWINDER = ("python import gdb.unwinder as u; u.register_unwinder(None, type('U', "
                  "(u.Unwinder,), {'__call__': lambda self, frame: None})('user_global'))")


def test_unwinder_commands_see_no_plugin(gdb_path: str, forks: Path) -> None:
    """Where gdb's own unwinder serves every objfile (their symbol files
    attached), gdb's unwinder commands see what they see on the twin: no
    ``sframe`` in ``info unwinder``, and ``disable unwinder global .*``
    disables the user's one alone."""
    commands = [_USER_UNWINDER, "info unwinder", "break marker", "run", "info unwinder",
                "disable unwinder global .*", "info unwinder", "bt", "enable unwinder global .*",
                "up", "info frame"]
    twin, ours = (_session(gdb_path, forks, which, commands, program="forks")
                  for which in ("twin", "noeh"))
    _same(commands, twin, ours)
    assert "1 unwinder disabled" in twin[5], twin[5]


def test_record_and_reverse(gdb_path: str, sessions: Path) -> None:
    _same_session(gdb_path, sessions, [
        "break outer", "run", "record full", "stepi 20", "bt", "reverse-stepi 5", "bt",
        "reverse-finish", "bt", "record stop"])


def test_mi_session(gdb_path: str, sessions: Path) -> None:
    """gdb -i=mi, as IDEs run it: the plugin finds its objfiles through gdb's
    API (no command output to parse), and every MI record is the twin's."""
    commands = ["-break-insert inner", "-exec-run", "-stack-info-depth", "-stack-list-frames",
                "-stack-list-variables --thread 1 --frame 1 --all-values",
                "-stack-list-arguments --thread 1 1", "-stack-info-frame",
                "-interpreter-exec console \"bt\"", "-exec-finish", "-stack-list-frames",
                "-gdb-exit"]

    def run(which: str) -> str:
        # The plugin loaded as an IDE's gdbinit loads it: every record counts,
        # from gdb's first one (its load line is not written under MI).
        load = ["-iex", f"source {PLUGIN}"] if which == "noeh" else []
        proc = subprocess.run(
            [gdb_path, "-nx", "-q", "-i=mi", "-iex", "set debuginfod enabled off", *load,
             f"{which}/sessions"], input="\n".join(["-gdb-set confirm off", *commands]) + "\n",
            text=True, capture_output=True, cwd=sessions, env=clean_env(), timeout=120)
        text = _normal(proc.stdout)
        return "\n".join(line for line in text.splitlines() if not line.startswith("=library-"))
    twin, ours = run("twin"), run("noeh")
    _no_python_errors(ours)
    assert ours == twin
    assert '^done,depth="4"' in twin, twin


def test_large_module_served_until_its_symbol_file_is_ready(gdb_path: str,
                                                             tmp_path: Path) -> None:
    """The default (``auto``) on an objfile too large to make its symbol file
    before gdb goes on (lua: 705 FDEs, with ``SFRAME_FOREGROUND_FDES=300``,
    the default where the C does not make the FDEs): a worker makes it while the Python
    unwinder serves the objfile, so the first stop's backtrace has the twin's
    real frames at once; the symbol file is attached at a stop after it is
    ready, and from then on the frames are the twin's exactly, tail-call
    frames included. A second session finds it in the cache at once."""
    program = need(LUA / "lua5.4.noeh")
    twin_program = need(LUA / "lua5.4")
    script = str(LUA.parent / "deep.lua")
    with Gdb(gdb_path, plugin=False, args=[str(twin_program)]) as g:
        g.cmd("break luaV_finishget")
        g.cmd(f"run {script}")
        twin = parse_bt(g.cmd("bt"))
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"),
           "SFRAME_STOP_WAIT_SECONDS": "0",  # never wait for the worker at a stop
           # lua5.4 to a worker (made at once by default where the C makes its FDEs)
           "SFRAME_FOREGROUND_FDES": "300"}
    with Gdb(gdb_path, symbol_files="auto", env=env, args=[str(program)]) as g:
        assert "until its symbol file is ready (being made for" in g.cmd("info sframe")
        g.cmd("break luaV_finishget")
        g.cmd(f"run {script}")
        first = g.cmd("bt")
        _no_python_errors(first)
        # (No tail-call frame at this stop, so the Python unwinder's frames
        # can be the twin's.)
        assert [(f.pc, f.name) for f in parse_bt(first)] == [(f.pc, f.name) for f in twin]
        # gdb attaches the file when the worker's event reaches it at the prompt.
        deadline = time.monotonic() + 300
        while "unwound by gdb's DWARF unwinder" not in (info := g.cmd("info sframe")):
            assert "no symbol file" not in info, info
            assert time.monotonic() < deadline, info
            time.sleep(0.2)
        assert [(f.pc, f.name) for f in parse_bt(g.cmd("bt"))] == [(f.pc, f.name) for f in twin]
    assert any(name.endswith(".debug") for name in os.listdir(tmp_path / "cache" / "sframe-gdb"
                                                               / "symbols"))
    with Gdb(gdb_path, symbol_files="auto", env=env, args=[str(program)]) as g:
        assert "unwound by gdb's DWARF unwinder from the symbol file" in g.cmd("info sframe")


def test_nearly_done_worker_is_waited_for_at_the_stop(gdb_path: str, tmp_path: Path) -> None:
    """lua5.4 -O2 -g (705 FDEs: a worker at ``SFRAME_FOREGROUND_FDES=300``), ``break luaV_finishget``
    before ``run``: a worker expected to be done soon after the stop is
    waited for there (``SFRAME_STOP_WAIT_SECONDS``, large here so that it
    always is), so the first stop is gdb's own from the symbol file: the
    twin's backtrace and ``info frame`` (its saved registers) exactly."""
    for which, name in (("twin", "lua5.4"), ("noeh", "lua5.4.noeh")):
        (tmp_path / which).mkdir()  # paths of one length: the same stack addresses
        shutil.copy(need(LUA / name), tmp_path / which / "lua5.4")
    commands = ["break luaV_finishget", f"run {LUA.parent / 'deep.lua'} > /dev/null", "bt",
                "frame 2", "info frame"]

    def session(which: str, env: dict[str, str] | None = None) -> list[str]:
        with Gdb(gdb_path, plugin=which == "noeh", env=env, symbol_files="auto",
                 args=[str(tmp_path / which / "lua5.4")]) as g:
            outs = [_normal(g.cmd(c), "lua5.4") for c in commands]
            return outs + [g.cmd("info sframe")] if which == "noeh" else outs

    # The same environment for both: the program's stack addresses depend on it.
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "SFRAME_STOP_WAIT_SECONDS": "120",
           "SFRAME_FOREGROUND_FDES": "300"}  # a worker, as without the C's FDEs
    twin = session("twin", env)
    assert "Breakpoint 1, luaV_finishget" in twin[1] and "Saved registers:" in twin[4], twin
    ours = session("noeh", env)
    _no_python_errors("\n".join(ours))
    assert ours[:-1] == twin
    assert "unwound by gdb's DWARF unwinder from the symbol file" in ours[-1], ours[-1]


def test_core_file(gdb_path: str, sessions: Path) -> None:
    """A core of each, loaded in a new gdb: the same frames, values and `info frame`."""
    for which in ("twin", "noeh"):
        _session(gdb_path, sessions, which, ["break inner", "run", f"gcore {which}.core", "kill"])
    outs = []
    for which in ("twin", "noeh"):
        with Gdb(gdb_path, plugin=which == "noeh", cwd=str(sessions),
                 args=[f"{which}/sessions", f"{which}.core"]) as g:
            outs.append([_normal(g.cmd(c)).replace("noeh.core", "twin.core")
                         for c in ("bt", "bt full", "up", "info frame", "frame 2", "info locals")])
    assert outs[1] == outs[0]
    assert [f.name for f in parse_bt(outs[0][0])] == ["inner", "middle", "outer", "main"]


@pytest.mark.parametrize("mode", ["remote", "extended-remote"])
def test_gdbserver(gdb_path: str, sessions: Path, mode: str) -> None:
    """gdbserver on this machine: ``target remote`` to a program it started,
    ``target extended-remote`` and ``run``; the frames are the twin's."""
    gdbserver = shutil.which("gdbserver")
    if gdbserver is None:
        raise AssertionError("gdbserver is needed (scripts/setup.sh installs it)")
    outs = []
    for which in ("twin", "noeh"):
        if mode == "remote":
            target = [f"target remote | {gdbserver} - {which}/sessions"]
        else:
            target = [f"target extended-remote | {gdbserver} --multi -",
                      f"set remote exec-file {which}/sessions"]
        commands = target + ["break inner", "continue" if mode == "remote" else "run", "bt",
                             "bt full", "up", "info frame", "finish"]
        with Gdb(gdb_path, plugin=which == "noeh", cwd=str(sessions),
                 args=["-iex", "set sysroot /", f"{which}/sessions"]) as g:
            out = [_normal(g.cmd(c)) for c in commands]
            _no_python_errors("".join(out))
            outs.append(out[len(target):])
            if mode == "extended-remote":
                g.cmd("kill")
                g.cmd("monitor exit")  # a --multi server outlives gdb's pipe otherwise
    assert outs[1] == outs[0]
    assert [f.name for f in parse_bt(outs[0][2])] == ["inner", "middle", "outer", "main"], outs[0]


def test_mi_non_stop(gdb_path: str, sessions: Path) -> None:
    """MI in non-stop mode, as IDEs use it: each command once the stop is
    reported; every record the twin's."""
    import pexpect

    commands = ["-break-insert inner", "-exec-run", "-stack-info-depth --thread 1",
                "-stack-list-frames --thread 1", "-stack-list-variables --thread 1 --frame 2 "
                "--all-values", "-thread-info"]

    def run(which: str) -> str:
        child = pexpect.spawn(gdb_path, ["-nx", "-q", "-i=mi", "-iex", "set debuginfod enabled off",
                                         "-iex", "set non-stop on", "-iex", "set mi-async on",
                                         f"{which}/sessions"], cwd=str(sessions), env=clean_env(),
                              encoding="utf-8", timeout=120, echo=False)
        out = []
        try:
            child.expect_exact("(gdb)")
            if which == "noeh":
                child.sendline(f'-interpreter-exec console "source {PLUGIN}"')
                child.expect(r"\^done")
                child.expect_exact("(gdb)")
            for command in commands:
                child.sendline(command)
                child.expect(r"\^(done|running|error)")
                text = child.before + child.after
                child.expect_exact("(gdb)")
                text += child.before
                if command == "-exec-run":
                    child.expect(r"\*stopped,[^\n]*")
                    text = child.after
                out.append(text)
            child.sendline("-gdb-exit")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        return _normal("\n".join(out).replace("\r\n", "\n"))
    twin, ours = run("twin"), run("noeh")
    _no_python_errors(ours)
    assert ours == twin
    assert '^done,depth="4"' in twin, twin


# -- gcc's hot/cold partitions (-freorder-blocks-and-partition, on at -O2) ---------

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.c"


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/demo.c with stop_here cold, built as distributions build (-O2, so
    gcc moves parse_record's call of stop_here into ``parse_record.cold``), as
    ``twin/cold`` and ``noeh/cold``."""
    for tool in ("gcc", "objcopy", "nm"):
        if shutil.which(tool) is None:
            raise AssertionError(f"{tool} is needed (scripts/setup.sh installs it)")
    root = tmp_path_factory.mktemp("cold")
    (root / "twin").mkdir()
    (root / "noeh").mkdir()
    text = DEMO.read_text()
    marked = text.replace("__attribute__((noinline)) void stop_here",
                          "__attribute__((noinline, cold)) void stop_here")
    assert marked != text
    (root / "cold.c").write_text(marked)
    subprocess.run(["gcc", "-O2", "-g", "-fomit-frame-pointer", "-Wa,--gsframe",
                    "-fno-use-linker-plugin", "-o", str(root / "twin" / "cold"),
                    str(root / "cold.c")], check=True)
    without_eh_frame(root / "twin" / "cold", root / "noeh" / "cold")
    symbols = subprocess.run(["nm", str(root / "twin" / "cold")], capture_output=True,
                             text=True, check=True).stdout
    assert re.search(r" t parse_record\.cold$", symbols, re.M), symbols
    return root


def _registers(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)\s+(0x[0-9a-f]+|<not saved>)", text, re.M))


def test_cold_partition_registers_are_the_twins(gdb_path: str, cold: Path) -> None:
    """Stopped in stop_here, called from ``parse_record.cold``: the backtrace
    is the twin's, and in read_records' frame the registers parse_record saved
    (rbx, r12, r13, in its hot part's prologue) are the twin's values: the
    symbol file gives the ``.cold`` part the rules the hot part's jumps into
    it prove (``analysis/parts.py``), as the twin's CFI has the hot part's
    saves in its cold FDE. rbp, which SFrame's rows carry, is the twin's too."""
    commands = ["break stop_here", "run", "bt", "frame 2", "info registers rbx rbp r12 r13"]
    twin, ours = (_session(gdb_path, cold, which, commands, program="cold")
                  for which in ("twin", "noeh"))
    frames = parse_bt(twin[2])
    assert [f.name for f in frames] == ["stop_here", "parse_record", "read_records",
                                        "load_config", "main"], twin[2]
    assert [(f.pc, f.name) for f in parse_bt(ours[2])] == [(f.pc, f.name) for f in frames]
    want, got = _registers(twin[4]), _registers(ours[4])
    assert list(want) == ["rbx", "rbp", "r12", "r13"] and "<not saved>" not in want.values()
    assert got == want, \
        f"{ours[4]}\n--- twin:\n{twin[4]}"


def test_large_module_waited_for_is_made_on_every_cpu(gdb_path: str, tmp_path: Path,
                                                      large_program: tuple[Path, Path]) -> None:
    """``foreground`` on a module large enough to be split between processes
    (``PARALLEL_MIN_FDES`` FDEs; ``SFRAME_SPLIT_MIN_FDES`` says so where the C
    makes the FDEs, which splits only far larger ones): its file comes from a
    worker at gdb's priority, on every CPU, while gdb waits
    (``symbol_file_now``), and the session is the twin's from the first stop."""
    commands = ["break stop_here", "run", "bt", "info frame", "up 3", "info frame",
                "info registers rbx rbp rsp rip", "finish"]
    for which, binary in zip(("twin", "noeh"), large_program, strict=True):
        (tmp_path / which).mkdir()
        shutil.copy(binary, tmp_path / which / "prog")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "SFRAME_SPLIT_MIN_FDES": "512"}
    twin = _session(gdb_path, tmp_path, "twin", commands, program="prog", env=env)
    ours = _session(gdb_path, tmp_path, "noeh", [*commands, "info sframe"], program="prog",
                    env=env)
    _same(commands, twin, ours[:-1])
    assert "unwound by gdb's DWARF unwinder from the symbol file" in ours[-1], ours[-1]
    assert len(parse_bt(twin[2])) > 20, twin[2]
    assert list((tmp_path / "cache" / "sframe-gdb" / "symbols").glob("*.debug"))
