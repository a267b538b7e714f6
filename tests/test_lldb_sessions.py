"""LLDB sessions a demanding user runs, each compared with LLDB alone on the
``.eh_frame`` twin (issue 18): a saved-FP cycle, an expression call stopped
at a breakpoint, and ``gdb-remote`` to GNU gdbserver.

The programs are built at test time by the host toolchain
(``helpers.host_programs``), the twin under the ``.noeh`` file's own name in
another directory, so that both print the same module names and, with
address randomisation off, the same addresses.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import Frame
from helpers.host_programs import build
from helpers.lldbtools import command_output, parse_bt, run_lldb
from helpers.oracle import gdb_path

pytestmark = pytest.mark.lldb

VERSIONS = ["21", "22", "23"]


def _pair(name: str, out: Path) -> tuple[Path, Path]:
    """``NAME.noeh`` and its twin, copied to ``b/NAME.noeh``."""
    built = build(name, out / "a")
    (out / "b").mkdir(exist_ok=True)
    twin = out / "b" / built.noeh.name
    if not twin.exists():
        shutil.copy2(built.twin, twin)
    return built.noeh, twin


@pytest.fixture(scope="module")
def cycle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _pair("cycle", tmp_path_factory.mktemp("cycle"))


def _env(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CACHE_HOME": str(tmp_path / "cache")}


def _frames(text: str) -> list[Frame]:
    """The frames of one ``bt``: from its selected frame 0 on (with a core,
    LLDB's event thread may print a thread status of its own, frame 0 not
    marked selected, into a command's output)."""
    return parse_bt(text[max(text.rfind("* frame #0:"), 0):])


# -- a saved FP that points at an inner frame ---------------------------------------

CYCLE_LLDB = ["stop_here", "cyc_self", "cyc_outer"]
CYCLE_STOP = re.compile(r"^Backtrace stopped: the CFA did not move up the stack: "
                        r"CFA 0x[0-9a-f]+ is not above SP 0x[0-9a-f]+$", re.M)


def _core(program: Path, tmp: Path) -> Path:
    """A core of ``program`` at stop_here (gdb's gcore; randomisation off)."""
    core = tmp / f"{program.parent.name}-{program.name}.core"
    out = subprocess.run([gdb_path(), "-nx", "-batch", "-ex", "break stop_here", "-ex", "run",
                          "-ex", f"gcore {core}", "-ex", "kill", str(program)],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert core.exists(), out.stdout + out.stderr
    return core


def _check_cycle(plain: str, sframe_bt: str, twin_bt: str) -> None:
    """Plain ``bt`` on the route is the twin's, exactly: LLDB's loop check
    (a CFA equal to the one two frames in) ends it after cyc_outer. ``sframe
    bt`` shows the frame that check drops, cyc_top, then says why it stops."""
    want = _frames(twin_bt)
    assert [f.name for f in want] == CYCLE_LLDB, twin_bt
    assert _frames(plain) == want, f"{plain}\n---\n{twin_bt}"
    ours = _frames(sframe_bt)
    assert ours == [*want, Frame(ours[-1].pc, "cyc_top")], sframe_bt
    assert CYCLE_STOP.search(sframe_bt), sframe_bt
    assert "Traceback" not in plain + sframe_bt


@pytest.mark.parametrize("version", VERSIONS)
def test_saved_fp_cycle_live(cycle: tuple[Path, Path], version: str, tmp_path: Path) -> None:
    noeh, twin = cycle
    common = ["breakpoint set -n stop_here", "process launch"]
    out = run_lldb(version, [f"target create {noeh}", *common, "bt", "sframe bt"],
                   env=_env(tmp_path))
    alone = run_lldb(version, [f"target create {twin}", *common, "bt"], plugin=False)
    _check_cycle(command_output(out, "bt"), command_output(out, "sframe bt"),
                 command_output(alone, "bt"))


@pytest.mark.gdb
@pytest.mark.parametrize("version", VERSIONS)
def test_saved_fp_cycle_core(cycle: tuple[Path, Path], version: str, tmp_path: Path) -> None:
    noeh, twin = cycle
    out = run_lldb(version, [f"target create {noeh} --core {_core(noeh, tmp_path)}", "bt",
                             "sframe bt"], env=_env(tmp_path))
    alone = run_lldb(version, [f"target create {twin} --core {_core(twin, tmp_path)}", "bt"],
                     plugin=False)
    _check_cycle(command_output(out, "bt"), command_output(out, "sframe bt"),
                 command_output(alone, "bt"))


# -- an expression call stopped at a breakpoint inside it ---------------------------

EXPR = 'script lldb.debugger.HandleCommand("expr -i false -- ((int(*)(int))f2)(2)")'
"""Through ``script``: batch mode stops at a command that fails, and an
expression that hits a breakpoint fails."""


def _entry(program: Path) -> int:
    from elftools.elf.elffile import ELFFile
    with open(program, "rb") as stream:
        return int(ELFFile(stream).header["e_entry"])


@pytest.mark.parametrize("version", ["21", "22", "23"])
def test_expression_call_stopped_inside(version: str, tmp_path: Path) -> None:
    """``expr -i false -- f2(2)`` stops at a breakpoint in f4: the twin's
    ``bt`` is f4, f2, ``$__lldb_expr``, then the frame at the expression's
    return address, which LLDB makes the entry point. LLDB unwinds that frame
    (pc - 1 is before ``_start``, outside every symbol) from ``.eh_frame``
    alone, never ``.debug_frame``: LLDB's symbol file carries the entry
    function's FDE in an ``.eh_frame`` (``frames._entry_eh_frame``). LLDB 21
    takes no ``.eh_frame`` from a symbol file: its file gives pc - 1 an
    unnamed symbol and an FDE instead (``frames._before_entry``)."""
    from helpers import X86, need
    twin, noeh = need(X86 / "busid-v3" / "deep"), need(X86 / "busid-v3" / "deep.noeh")
    steps = ["breakpoint set -n main", "process launch", "breakpoint set -n f4", EXPR, "bt"]
    alone = _frames(command_output(run_lldb(version, [f"target create {twin}", *steps],
                                            plugin=False), "bt"))
    assert [f.name for f in alone[:3]] == ["f4", "f2", "$__lldb_expr"], alone
    assert len(alone) == 4 and alone[3].pc == 0x555555554000 + _entry(twin), alone
    out = run_lldb(version, [f"target create {noeh}", *steps], env=_env(tmp_path))
    assert "Traceback" not in out
    assert _frames(command_output(out, "bt")) == alone, out[-3000:]


# -- gdb-remote to GNU gdbserver ----------------------------------------------------

def _gdbserver_session(version: str, program: Path, *, plugin: bool, before: list[str],
                       after: list[str], env: dict[str, str] | None = None,
                       last: tuple[str, ...] = (), create: bool = True) -> str:
    """``target create``, ``gdb-remote`` to GNU gdbserver running ``program``
    (``before`` and ``after`` the connection), then ``continue`` to stop_here,
    ``bt`` and ``last``."""
    import socket
    import time

    from helpers import missing
    gdbserver = shutil.which("gdbserver")
    if gdbserver is None:
        missing("gdbserver is missing (scripts/setup.sh installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = subprocess.Popen([gdbserver, f"127.0.0.1:{port}", str(program)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        first = [f"target create {program}"] if create else []
        return run_lldb(version, [*first, *before,
                                  f"gdb-remote 127.0.0.1:{port}", *after,
                                  "breakpoint set -n stop_here", "continue", "bt", *last,
                                  "process kill"], plugin=plugin, env=env)
    finally:
        server.kill()
        server.wait()


def _report(transcript: str) -> str:
    """What ``gdb-remote`` printed, the process id and module name taken out."""
    found = re.search(r"^\(lldb\) gdb-remote \S+\n(.*?)^\(lldb\) ", transcript, re.M | re.S)
    assert found, transcript
    text = found.group(1).replace(".noeh", "")
    return re.sub(r"Process \d+", "Process N", text)


def _normal(transcript: str) -> str:
    """A session's whole output but the plugin's import line, with the module
    name, process id and port taken out."""
    text = re.sub(r"^\(lldb\) command script import \S+\n", "", transcript, flags=re.M)
    text = re.sub(r"Process \d+", "Process N", text.replace(".noeh", ""))
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)


@pytest.mark.parametrize("version", VERSIONS)
def test_gdbserver_stop_report(version: str, tmp_path: Path) -> None:
    """LLDB alone on the twin prints the connection's stop report; with any
    stop-hook that runs at the first stop (``script pass`` here, without the
    plugin) LLDB drops it. The plugin's hook would be one: the plugin runs
    ahead of ``gdb-remote`` and keeps its hook from that stop, and the
    session prints what LLDB prints on the twin, whole (the report, the
    breakpoint's stop, ``bt`` at stop_here)."""
    from helpers import X86, need
    twin, noeh = need(X86 / "busid-v3" / "deep"), need(X86 / "busid-v3" / "deep.noeh")
    alone = _gdbserver_session(version, twin, plugin=False, before=[], after=[])
    report = _report(alone)
    assert re.fullmatch(r"Process N stopped\n\* thread #1, stop reason = signal SIGTRAP\n"
                        r"\s+frame #0: 0x[0-9a-f]+ ?\n(?:(?:->)?\s+0x[0-9a-f]+: .*\n)*",
                        report), alone
    want = _frames(command_output(alone, "bt"))
    assert [f.name for f in want[:4]] == ["stop_here", "f4", "f2", "f1"], alone

    hooked = _gdbserver_session(version, twin, plugin=False,
                                before=['target stop-hook add -o "script pass"'], after=[])
    assert _report(hooked) == "Process N stopped\n", hooked

    out = _gdbserver_session(version, noeh, plugin=True, before=[], after=[],
                             env=_env(tmp_path), last=("sframe status",))
    status = command_output(out, "sframe status")
    assert re.match(r"sframe-gdb \S+\ndeep\.noeh: LLDB's own unwinder, \.debug_frame from "
                    r"SFrame in ", status), status
    session = re.sub(r"^\(lldb\) sframe status\n.*?(?=^\(lldb\) process kill)", "", out,
                     flags=re.M | re.S)
    assert _normal(session) == _normal(alone), f"{out}\n---\n{alone}"


@pytest.mark.parametrize("version", VERSIONS)
def test_gdbserver_stop_report_without_a_target(version: str, tmp_path: Path) -> None:
    """``gdb-remote`` with no target: the connection makes the target from the
    dummy target, hooks and all. LLDB alone learns no executable from GNU
    gdbserver there (the breakpoint stays pending, the process runs to its
    end), and prints the connection's stop report; the plugin's hook in that
    target starts at the next stop (later targets get it at their first stop
    again), so the session is LLDB's alone, whole."""
    from helpers import X86, need
    twin, noeh = need(X86 / "busid-v3" / "deep"), need(X86 / "busid-v3" / "deep.noeh")
    alone = _gdbserver_session(version, twin, plugin=False, before=[], after=[], create=False)
    assert re.fullmatch(r"Process N stopped\n\* thread #1, stop reason = signal SIGTRAP\n"
                        r"\s+frame #0: 0x[0-9a-f]+.*\n(?:(?:->)?\s+0x[0-9a-f]+: .*\n)*",
                        _report(alone)), alone
    out = _gdbserver_session(version, noeh, plugin=True, before=[], after=[],
                             env=_env(tmp_path), last=("sframe status",), create=False)
    assert "Traceback" not in out and "sframe:" not in out, out
    session = re.sub(r"^\(lldb\) sframe status\n.*?(?=^\(lldb\) process kill)", "", out,
                     flags=re.M | re.S)
    assert _normal(session) == _normal(alone), f"{out}\n---\n{alone}"
