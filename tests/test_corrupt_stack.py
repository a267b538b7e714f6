"""A return address overwritten mid-stack ends every front end's backtrace with a reason.

``smash KIND`` (tests/fixtures/src/smash.c, built here by the host toolchain)
overwrites middle's return address with a pointer into the stack, the heap,
its own data, no mapping, a non-canonical value or a small integer, then
stops in stop_here (or sleeps, for ``--pid``). Every front end must show
stop_here, inner, middle and then say why it stopped, never one more
``??`` frame made of the bad value.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers.host_programs import HostProgram, build
from helpers.oracle import gdb_path, sframe
from test_live import PAUSE_FRAMES, running

KINDS = ["stack", "heap", "data", "unmapped", "noncanonical", "low"]
FRAMES = ["stop_here", "inner", "middle"]
STOPPED = "Backtrace stopped: implausible return address: "


@pytest.fixture(scope="module")
def smash(tmp_path_factory: pytest.TempPathFactory) -> HostProgram:
    return build("smash", tmp_path_factory.mktemp("smash"))


def reason(kind: str, bad: int, program: Path, *, live: bool) -> str:
    """The words after ``implausible return address: `` (a regex for the heap's
    mapping, which a core does not name)."""
    if kind == "stack":
        return re.escape(f"{bad:#x} is in [stack], which is not executable")
    if kind == "heap":
        where = r"\[heap\]" if live else r"the mapping 0x[0-9a-f]+-0x[0-9a-f]+"
        return re.escape(f"{bad:#x} is in ") + where + re.escape(", which is not executable")
    if kind == "data":
        return re.escape(f"{bad:#x} is in {program}, which is not executable")
    if kind == "unmapped":
        return re.escape(f"{bad:#x} is in no mapping")
    if kind == "noncanonical":
        return re.escape(f"{bad:#x} is not a canonical user-space address "
                         "(amd64: below 0x800000000000)")
    assert kind == "low"
    return re.escape(f"{bad:#x} is below 0x1000, where nothing is ever mapped")


def smashed_core(program: Path, kind: str, tmp: Path) -> tuple[Path, int]:
    """A core of ``smash KIND`` at stop_here, and the value written over the RA."""
    core = tmp / f"smash-{kind}.core"
    out = subprocess.run([gdb_path(), "-nx", "-batch", "-ex", "break stop_here", "-ex", "run",
                          "-ex", "printf \"BAD %#lx\\n\", *(long *)&bad", "-ex", f"gcore {core}",
                          "-ex", "kill", "--args", str(program), kind],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    found = re.search(r"^BAD (0x[0-9a-f]+)$", out.stdout, re.M)
    assert found and core.exists(), out.stdout + out.stderr
    return core, int(found.group(1), 16)


def check_tail(text: str, program: Path, kind: str, bad: int, *, live: bool) -> None:
    lines = text.splitlines()
    frames = [line for line in lines if line.startswith("#")]
    want = PAUSE_FRAMES + FRAMES[1:] if live else FRAMES
    assert [re.sub(r"^#\d+\s+0x[0-9a-f]+ in (\S+?)\+\d+ .*$", r"\1", f)
            for f in frames] == want, text
    assert frames[-1].endswith(f" ({program})"), text
    assert re.fullmatch(re.escape(STOPPED) + reason(kind, bad, program, live=live),
                        lines[-1]), text


@pytest.mark.gdb
@pytest.mark.parametrize("kind", KINDS)
def test_cli_core(smash: HostProgram, kind: str, tmp_path: Path) -> None:
    core, bad = smashed_core(smash.noeh, kind, tmp_path)
    text = sframe("backtrace", "--core", str(core)).stdout
    assert "??" not in text
    check_tail(text, smash.noeh, kind, bad, live=False)


@pytest.mark.parametrize("kind", ["stack", "heap"])
def test_cli_pid(smash: HostProgram, kind: str) -> None:
    with running(smash.noeh, kind, "sleep") as proc:
        text = sframe("backtrace", "--pid", str(proc.pid)).stdout
    assert "??" not in text
    # The bad value is not known from outside: any address of the kind.
    last = text.splitlines()[-1]
    found = re.search(r"(0x[0-9a-f]+) is", last)
    assert found, text
    check_tail(text, smash.noeh, kind, int(found.group(1), 16), live=True)


# -- LLDB ------------------------------------------------------------------------

LLDB_FRAME = re.compile(r"^\s*\*?\s*frame #(\d+): 0x[0-9a-f]+ smash\.noeh`(\w+)", re.M)


def _lldb_tail(text: str, kind: str, bad: int | None, program: Path, *, live: bool,
               prefix: str, cut: bool = True) -> None:
    """stop_here, inner, middle, then ``prefix`` and the reason, on its own line."""
    assert "Traceback" not in text, text
    # With a core, LLDB's event thread prints a thread status of its own
    # (frame 0, not marked selected) into a command's output, before or after.
    if cut:
        text = text[max(text.rfind("* frame #0:"), 0):]
        end = text.find("\n", text.find(prefix))
        text = text[:end if end >= 0 else len(text)]
    assert [m.group(2) for m in LLDB_FRAME.finditer(text)] == FRAMES, text
    found = re.search(re.escape(prefix) + r"implausible return address: (0x[0-9a-f]+) is", text)
    assert found, text
    value = int(found.group(1), 16) if bad is None else bad
    line = next(line for line in text.splitlines() if prefix + "implausible" in line)
    assert re.fullmatch(re.escape(prefix) + "implausible return address: "
                        + reason(kind, value, program, live=live) + r"( \(after frame #2\))?",
                        line.strip()), text
    assert "??" not in text and "0x" + f"{value:016x}" not in text, text


@pytest.mark.lldb
@pytest.mark.parametrize("version", ["21", "22", "23"])
@pytest.mark.parametrize("kind", ["stack", "unmapped"])
def test_lldb_sframe_bt_live(smash: HostProgram, version: str, kind: str) -> None:
    from helpers.lldbtools import command_output, run_lldb
    out = run_lldb(version, [f"target create {smash.noeh}", "breakpoint set -n stop_here",
                             f"process launch -- {kind}", "sframe bt"])
    text = command_output(out, "sframe bt")
    _lldb_tail(text, kind, None, smash.noeh, live=True, prefix="Backtrace stopped: ")


@pytest.mark.lldb
@pytest.mark.parametrize("version", ["22", "23"])
def test_lldb_plain_bt_live(smash: HostProgram, version: str) -> None:
    """The frame provider (the native route off): LLDB's own ``bt`` ends at
    middle, and the plugin says why once, on LLDB's error stream."""
    from helpers.lldbtools import command_output, run_lldb
    out = run_lldb(version, [f"target create {smash.noeh}", "breakpoint set -n stop_here",
                             "process launch -- heap", "bt"], env={"SFRAME_LLDB_ROUTE": "provider"})
    bt = command_output(out, "bt")
    _lldb_tail(bt, "heap", None, smash.noeh, live=True, prefix="sframe: Backtrace stopped: ",
               cut=False)


@pytest.mark.lldb
@pytest.mark.parametrize("version", ["22", "23"])
def test_lldb_plain_bt_live_native_route(smash: HostProgram, version: str) -> None:
    """The native route (LLDB's unwinder on our symbol file): ``bt`` ends at
    middle too, with no frame made from the smashed return address (LLDB's
    own unwinder gives no reason)."""
    from helpers.lldbtools import command_output, run_lldb
    out = run_lldb(version, [f"target create {smash.noeh}", "breakpoint set -n stop_here",
                             "process launch -- heap", "bt"])
    bt = command_output(out, "bt")
    assert "Traceback" not in out, out
    assert [m.group(2) for m in LLDB_FRAME.finditer(bt)] == FRAMES, bt


@pytest.mark.lldb
@pytest.mark.gdb
@pytest.mark.parametrize("version", ["21", "23"])
@pytest.mark.parametrize("kind", ["stack", "noncanonical"])
def test_lldb_sframe_bt_core(smash: HostProgram, version: str, kind: str,
                             tmp_path: Path) -> None:
    from helpers.lldbtools import command_output, run_lldb
    core, bad = smashed_core(smash.noeh, kind, tmp_path)
    out = run_lldb(version, [f"target create {smash.noeh} --core {core}", "sframe bt"])
    text = command_output(out, "sframe bt")
    _lldb_tail(text, kind, bad, smash.noeh, live=False, prefix="Backtrace stopped: ")
